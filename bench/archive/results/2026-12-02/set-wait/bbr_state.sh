#!/bin/bash
# usage: bbr_state.sh PORT ALTS : 32 x 256 KiB SET batches, ours vs LMCache's C++ connector; for each run
# the client CPU a batch and the BBR state of its loaded connections (ss -tin, 5-9 s in); then
# the same under cubic (the system's default congestion control switched for the runs, restored).
# Paths from the environment (bench/archive/README.md): REPO, LMC, SCRATCH.
REPO=${REPO:-$(cd "$(dirname "$0")/../../../../.." && pwd)}
LMC=${LMC:-$REPO/target/lmcache-0.5.6/venv/bin/python}
SCRATCH=${SCRATCH:?set SCRATCH to a folder for this probe\'s own files (bench/archive/README.md)}
set -u
PORT=$1 ALTS=$2
here=$(cd "$(dirname "$0")" && pwd)
run() { # who
  if [ $1 = ours ]; then PY=$REPO/.venv/bin/python; S=4; else PY=$LMC; S=6; fi
  (OPENBLAS_NUM_THREADS=1 PYTHONPATH=$REPO $PY $here/../matrix/batch_latency2.py $1 $PORT set 32 262144 4000 >$SCRATCH/bbr-run.txt 2>/dev/null &)
  sleep $S
  state=""
  for _ in $(seq 20); do  # the C++ connector's process imports torch first: look until its connections carry data
    state=$(ss -tin "( dport = :$PORT )" | grep "bytes_sent:[0-9]\{8,\}" | grep -o "pacing_gain:[0-9.]*" | sort | uniq -c | tr -s ' ' | tr '\n' ' ')
    [ -n "$state" ] || [ "$(sysctl -n net.ipv4.tcp_congestion_control)" != bbr ] && break
    sleep 0.5
  done
  while pgrep -f "batch_latency2.py $1 $PORT" >/dev/null; do sleep 1; done
  echo "$(sysctl -n net.ipv4.tcp_congestion_control) $1: $(head -1 $SCRATCH/bbr-run.txt | grep -o 'p50 [0-9.]* ms\|  cpu/batch [0-9.]* ms' | tr '\n' ' ') | loaded connections: ${state:-none seen}"
  redis-cli -p $PORT flushall >/dev/null
}
was=$(sysctl -n net.ipv4.tcp_congestion_control)
trap 'sysctl -qw net.ipv4.tcp_congestion_control=$was' EXIT  # restored however the script ends
for cc in bbr cubic; do
  sysctl -qw net.ipv4.tcp_congestion_control=$cc
  for i in $(seq $ALTS); do
    if [ $((i % 2)) = 1 ]; then run ours; run cpp; else run cpp; run ours; fi
  done
done
sysctl -qw net.ipv4.tcp_congestion_control=$was
