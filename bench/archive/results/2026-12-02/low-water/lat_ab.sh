#!/bin/bash
# usage: lat_ab.sh KIND REGIME OP N SIZE REPS PAIRS  -> per-batch p50 ours vs cpp, ABBA
# Paths from the environment (bench/archive/README.md): REPO, LMC, SCRATCH.
REPO=${REPO:-$(cd "$(dirname "$0")/../../../../.." && pwd)}
LMC=${LMC:-$REPO/target/lmcache-0.5.6/venv/bin/python}
SCRATCH=${SCRATCH:?set SCRATCH to a folder for this probe\'s own files (bench/archive/README.md)}
set -u
KIND=$1 REGIME=$2 OP=$3 N=$4 SIZE=$5 REPS=$6 PAIRS=$7
cd /tmp
$REPO/.venv/bin/python $SCRATCH/serve.py $KIND $REGIME > $SCRATCH/serve.port &
SP=$!
sleep 1.5; PORT=$(head -1 $SCRATCH/serve.port)
for i in $(seq $PAIRS); do
  if [ $((i % 2)) = 1 ]; then order="ours cpp"; else order="cpp ours"; fi
  for w in $order; do
    PYTHONPATH=$REPO $LMC $SCRATCH/batch_latency.py $w $PORT $OP $N $SIZE $REPS
    redis-cli -p $PORT flushall async >/dev/null 2>&1 || true
  done
done
kill $SP; sleep 0.5; redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; wait 2>/dev/null
