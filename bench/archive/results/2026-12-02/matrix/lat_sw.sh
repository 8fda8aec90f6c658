#!/bin/bash
# usage: lat_sw.sh KIND OP N SIZE REPS ALTS : ours vs cpp batch latency + CPU + context switches
set -u
KIND=$1 OP=$2 N=$3 SIZE=$4 REPS=$5 ALTS=$6
here=$(cd "$(dirname "$0")" && pwd)
cd /tmp
/work/main/.venv/bin/python $here/../low-water/serve.py $KIND steady > /tmp/serve.port &
SP=$!; sleep 1.5; PORT=$(head -1 /tmp/serve.port)
for i in $(seq $ALTS); do
  order="ours cpp"; [ $((i % 2)) = 0 ] && order="cpp ours"
  for w in $order; do
    if [ $w = ours ]; then PY=/work/main/.venv/bin/python; else PY=/work/lmc-venv/bin/python; fi
    PYTHONPATH=/work/main $PY $here/batch_latency2.py $w $PORT $OP $N $SIZE $REPS 2>/dev/null
    redis-cli -p $PORT flushall >/dev/null
  done
done
kill $SP; sleep 0.5; redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; wait 2>/dev/null
