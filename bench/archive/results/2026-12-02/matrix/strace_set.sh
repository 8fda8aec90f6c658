#!/bin/bash
# usage: strace_set.sh OP N SIZE REPS : syscall counts per batch, ours vs cpp (strace -c -f)
set -u
OP=$1 N=$2 SIZE=$3 REPS=$4
here=$(cd "$(dirname "$0")" && pwd)
cd /tmp
/work/main/.venv/bin/python $here/../low-water/serve.py redis steady > /tmp/serve.port &
SP=$!; sleep 1.5; PORT=$(head -1 /tmp/serve.port)
for w in ours cpp; do
  if [ $w = ours ]; then PY=/work/main/.venv/bin/python; else PY=/work/lmc-venv/bin/python; fi
  PYTHONPATH=/work/main strace -f -c -o /tmp/strace.$w.txt $PY $here/batch_latency2.py $w $PORT $OP $N $SIZE $REPS 2>/dev/null
  redis-cli -p $PORT flushall >/dev/null
  echo "== $w"; head -25 /tmp/strace.$w.txt
done
kill $SP; sleep 0.5; redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; wait 2>/dev/null
