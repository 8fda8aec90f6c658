#!/bin/bash
# usage: lat_oldnew.sh KIND REGIME OP N SIZE REPS PAIRS -> old wheel ($OLD_PATH) vs the checkout's .venv, ABBA; also cpp
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
  if [ $((i % 2)) = 1 ]; then order="old new cpp"; else order="cpp new old"; fi
  for w in $order; do
    case $w in
      old) echo -n "old "; PYTHONPATH=${OLD_PATH:?set OLD_PATH to the old build\'s package folder} $REPO/.venv/bin/python $SCRATCH/batch_latency.py ours $PORT $OP $N $SIZE $REPS ;;
      new) echo -n "new "; PYTHONPATH=$REPO $REPO/.venv/bin/python $SCRATCH/batch_latency.py ours $PORT $OP $N $SIZE $REPS ;;
      cpp) echo -n "cpp "; $LMC $SCRATCH/batch_latency.py cpp $PORT $OP $N $SIZE $REPS 2>/dev/null | grep cpp ;;
    esac
  done
done
kill $SP; sleep 0.5; redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; wait 2>/dev/null
