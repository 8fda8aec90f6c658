#!/bin/bash
# usage: lat_oldnew.sh KIND REGIME OP N SIZE REPS PAIRS -> old wheel (/work/ab/venv-new) vs main's .venv, ABBA; also cpp
set -u
KIND=$1 REGIME=$2 OP=$3 N=$4 SIZE=$5 REPS=$6 PAIRS=$7
cd /tmp
/work/main/.venv/bin/python /work/scratch/serve.py $KIND $REGIME > /tmp/serve.port &
SP=$!
sleep 1.5; PORT=$(head -1 /tmp/serve.port)
for i in $(seq $PAIRS); do
  if [ $((i % 2)) = 1 ]; then order="old new cpp"; else order="cpp new old"; fi
  for w in $order; do
    case $w in
      old) echo -n "old "; PYTHONPATH=${OLD_PATH:-/work/ab/pkg-short} /work/main/.venv/bin/python /work/scratch/batch_latency.py ours $PORT $OP $N $SIZE $REPS ;;
      new) echo -n "new "; PYTHONPATH=/work/main /work/main/.venv/bin/python /work/scratch/batch_latency.py ours $PORT $OP $N $SIZE $REPS ;;
      cpp) echo -n "cpp "; /work/lmc-venv/bin/python /work/scratch/batch_latency.py cpp $PORT $OP $N $SIZE $REPS 2>/dev/null | grep cpp ;;
    esac
  done
done
kill $SP; sleep 0.5; redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; wait 2>/dev/null
