#!/bin/bash
# perf record ours and cpp 32x256K SET batches; summarize by symbol
set -u
M=/work/main/bench/results/2026-12-02
cd /tmp
/work/main/.venv/bin/python $M/low-water/serve.py redis steady > /tmp/servep.port &
SP=$!; sleep 1.5; PORT=$(head -1 /tmp/servep.port)
for w in ours cpp; do
  if [ $w = ours ]; then PY=/work/main/.venv/bin/python; else PY=/work/lmc-venv/bin/python; fi
  PYTHONPATH=/work/main perf record -q -F 4999 -g -o /tmp/perf-$w.data -- $PY $M/matrix/batch_latency2.py $w $PORT set 32 262144 3000 2>/dev/null
  redis-cli -p $PORT flushall >/dev/null
done
kill $SP; sleep 0.5; redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; wait 2>/dev/null
