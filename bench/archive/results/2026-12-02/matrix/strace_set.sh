#!/bin/bash
# usage: strace_set.sh OP N SIZE REPS : syscall counts per batch, ours vs cpp (strace -c -f)
# Paths from the environment (bench/archive/README.md): REPO, LMC, SCRATCH.
REPO=${REPO:-$(cd "$(dirname "$0")/../../../../.." && pwd)}
LMC=${LMC:-$REPO/target/lmcache-0.5.6/venv/bin/python}
SCRATCH=${SCRATCH:?set SCRATCH to a folder for this probe\'s own files (bench/archive/README.md)}
set -u
OP=$1 N=$2 SIZE=$3 REPS=$4
here=$(cd "$(dirname "$0")" && pwd)
cd /tmp
$REPO/.venv/bin/python $here/../low-water/serve.py redis steady > $SCRATCH/serve.port &
SP=$!; sleep 1.5; PORT=$(head -1 $SCRATCH/serve.port)
for w in ours cpp; do
  if [ $w = ours ]; then PY=$REPO/.venv/bin/python; else PY=$LMC; fi
  PYTHONPATH=$REPO strace -f -c -o $SCRATCH/strace.$w.txt $PY $here/batch_latency2.py $w $PORT $OP $N $SIZE $REPS 2>/dev/null
  redis-cli -p $PORT flushall >/dev/null
  echo "== $w"; head -25 $SCRATCH/strace.$w.txt
done
kill $SP; sleep 0.5; redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; wait 2>/dev/null
