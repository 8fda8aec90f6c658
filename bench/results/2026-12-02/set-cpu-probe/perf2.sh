#!/bin/bash
# perf record ours and cpp 32x256K SET batches; summarize by symbol
#   REPO: the checkout (default this one); PY: its Python (default its .venv);
#   CPP: a Python that imports LMCache's C++ connector, lmcache.lmcache_redis (no default:
#   ../shared/peers/lmcache-native/setup.sh DIR makes one, DIR/bin/python)
#   The profiles: $OUT/perf-ours.data and $OUT/perf-cpp.data (OUT: default a new temporary folder).
set -u
M=$(cd "$(dirname "$0")/.." && pwd)
REPO=${REPO:-$(cd "$M/../../.." && pwd)}
OURS=${PY:-$REPO/.venv/bin/python}
CPP=${CPP:?set CPP to a Python that imports LMCache\'s C++ connector (lmcache.lmcache_redis)}
OUT=${OUT:-$(mktemp -d)}
cd /tmp
$OURS $M/low-water/serve.py redis steady > "$OUT/serve.port" &
SP=$!; sleep 1.5; PORT=$(head -1 "$OUT/serve.port")
for w in ours cpp; do
  if [ $w = ours ]; then PY=$OURS; else PY=$CPP; fi
  PYTHONPATH=$REPO perf record -q -F 4999 -g -o "$OUT/perf-$w.data" -- $PY $M/matrix/batch_latency2.py $w $PORT set 32 262144 3000 2>/dev/null
  redis-cli -p $PORT flushall >/dev/null
done
kill $SP; sleep 0.5; redis-cli -p $PORT shutdown nosave >/dev/null 2>&1; wait 2>/dev/null
echo "profiles in $OUT"
