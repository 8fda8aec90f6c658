#!/bin/bash
# usage: lat3.sh KIND OP N SIZE REPS ALTS : ours (floor off), ours (floor on), cpp; rotating order
set -u
KIND=$1 OP=$2 N=$3 SIZE=$4 REPS=$5 ALTS=$6
M=/work/main/bench/results/2026-12-02
cd /tmp
/work/main/.venv/bin/python $M/low-water/serve.py $KIND steady > /tmp/serve3.port &
SP=$!; sleep 1.5; PORT=$(head -1 /tmp/serve3.port)
for i in $(seq $ALTS); do
  case $((i % 3)) in 0) order="off on cpp";; 1) order="on cpp off";; 2) order="cpp off on";; esac
  for w in $order; do
    case $w in
      off) PYTHONPATH=/work/main /work/main/.venv/bin/python $M/matrix/batch_latency2.py ours $PORT $OP $N $SIZE $REPS 2>/dev/null | sed 's/^ours /off  /';;
      on) env "${ONVAR:-LMR_FLOOR}=1" PYTHONPATH=/work/main /work/main/.venv/bin/python $M/matrix/batch_latency2.py ours $PORT $OP $N $SIZE $REPS 2>/dev/null | sed 's/^ours /on   /';;
      cpp) /work/lmc-venv/bin/python $M/matrix/batch_latency2.py cpp $PORT $OP $N $SIZE $REPS 2>/dev/null;;
    esac
    redis-cli -p $PORT flushall >/dev/null
  done
done
kill $SP; sleep 0.5; redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; wait 2>/dev/null
