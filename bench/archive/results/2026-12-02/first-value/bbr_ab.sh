#!/bin/bash
# usage: bbr_ab.sh ALTS : ours, 32 x 256 KiB SET batches, the restart after the handshake (final.so)
# against the restart before the first large send (large.so), ABBA; BBR state of loaded connections.
# Paths from the environment (bench/archive/README.md): REPO, SCRATCH.
REPO=${REPO:-$(cd "$(dirname "$0")/../../../../.." && pwd)}
SCRATCH=${SCRATCH:?set SCRATCH to a folder for this probe\'s own files (bench/archive/README.md)}
set -u
ALTS=$1
M=$REPO/bench/results/2026-12-02
SO=$REPO/lmcache_resp/_native.abi3.so
cd /tmp
$REPO/.venv/bin/python $M/low-water/serve.py redis steady > $SCRATCH/servebb.port &
SP=$!; sleep 1.5; PORT=$(head -1 $SCRATCH/servebb.port)
for i in $(seq $ALTS); do
  order="final large"; [ $((i % 2)) = 0 ] && order="large final"
  for w in $order; do
    cp $SCRATCH/native-$w.so $SO.tmp && mv -f $SO.tmp $SO
    (OPENBLAS_NUM_THREADS=1 PYTHONPATH=$REPO $REPO/.venv/bin/python $M/matrix/batch_latency2.py ours $PORT set 32 262144 4000 >$SCRATCH/bbr-ab.txt 2>/dev/null &)
    sleep 4
    state=$(ss -tin "( dport = :$PORT )" | grep "bytes_sent:[0-9]\{8,\}" | grep -o "pacing_gain:[0-9.]*" | sort | uniq -c | tr -s ' ' | tr '\n' ' ')
    while pgrep -f "batch_latency2.py ours $PORT" >/dev/null; do sleep 1; done
    echo "$w: $(head -1 $SCRATCH/bbr-ab.txt | grep -o 'p50 [0-9.]* ms\|  cpu/batch [0-9.]* ms' | tr '\n' ' ') | loaded: $state"
    redis-cli -p $PORT flushall >/dev/null
  done
done
cp $SCRATCH/native-large.so $SO.tmp && mv -f $SO.tmp $SO
kill $SP; sleep 0.5; redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; wait 2>/dev/null
