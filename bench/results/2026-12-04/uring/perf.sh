#!/bin/bash
# perf record of 2000 32 x 256 KiB SET batches on each loop (redis 7.0 steady); the top symbols
# of each (children excluded) into perf-poll.txt / perf-uring.txt.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=${REPO:-$(cd "$HERE/../../../.." && pwd)}
PY=${PY:-$REPO/.venv/bin/python}
WORK=$(mktemp -d)  # the server's port and perf's profiles
cd /tmp
PYTHONPATH=$REPO $PY "$HERE/serve.py" redis steady > "$WORK/serve.port" &
SP=$!; sleep 1.5; PORT=$(head -1 "$WORK/serve.port")
for w in poll uring; do
  OURS_KW="{\"io_backend\": \"$w\"}" PYTHONPATH=$REPO perf record -q -F 2999 -g -o "$WORK/perf-$w.data" -- $PY "$HERE/batch.py" ours "$PORT" set 32 262144 2000 2>/dev/null
  perf report -i "$WORK/perf-$w.data" --no-children --sort sym --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -40 > "$HERE/perf-$w.txt"
  redis-cli -p "$PORT" flushall >/dev/null
done
kill $SP; sleep 0.5; redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1; wait 2>/dev/null; rm -rf "$WORK"
