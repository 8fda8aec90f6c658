#!/bin/bash
# usage: lat_sw.sh KIND OP N SIZE REPS ALTS : ours vs cpp batch latency + CPU + context switches
# Paths from the environment (bench/archive/README.md): REPO, LMC, SCRATCH.
REPO=${REPO:-$(cd "$(dirname "$0")/../../../../.." && pwd)}
LMC=${LMC:-$REPO/target/lmcache-0.5.6/venv/bin/python}
SCRATCH=${SCRATCH:?set SCRATCH to a folder for this probe\'s own files (bench/archive/README.md)}
set -u
KIND=$1 OP=$2 N=$3 SIZE=$4 REPS=$5 ALTS=$6
here=$(cd "$(dirname "$0")" && pwd)
cd /tmp
$REPO/.venv/bin/python $here/../low-water/serve.py $KIND steady > $SCRATCH/serve.port &
SP=$!; sleep 1.5; PORT=$(head -1 $SCRATCH/serve.port)
for i in $(seq $ALTS); do
  order="ours cpp"; [ $((i % 2)) = 0 ] && order="cpp ours"
  for w in $order; do
    if [ $w = ours ]; then PY=$REPO/.venv/bin/python; else PY=$LMC; fi
    PYTHONPATH=$REPO $PY $here/batch_latency2.py $w $PORT $OP $N $SIZE $REPS 2>/dev/null
    redis-cli -p $PORT flushall >/dev/null
  done
done
kill $SP; sleep 0.5; redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; wait 2>/dev/null
