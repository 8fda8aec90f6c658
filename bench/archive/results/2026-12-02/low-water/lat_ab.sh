#!/bin/bash
# usage: lat_ab.sh KIND REGIME OP N SIZE REPS PAIRS  -> per-batch p50 ours vs cpp, ABBA
set -u
KIND=$1 REGIME=$2 OP=$3 N=$4 SIZE=$5 REPS=$6 PAIRS=$7
cd /tmp
/work/main/.venv/bin/python /work/scratch/serve.py $KIND $REGIME > /tmp/serve.port &
SP=$!
sleep 1.5; PORT=$(head -1 /tmp/serve.port)
for i in $(seq $PAIRS); do
  if [ $((i % 2)) = 1 ]; then order="ours cpp"; else order="cpp ours"; fi
  for w in $order; do
    PYTHONPATH=/work/main /work/lmc-venv/bin/python /work/scratch/batch_latency.py $w $PORT $OP $N $SIZE $REPS
    redis-cli -p $PORT flushall async >/dev/null 2>&1 || true
  done
done
kill $SP; sleep 0.5; redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; wait 2>/dev/null
