#!/bin/bash
# usage: shapes.sh KIND OP N SIZE REPS ALTS [INFLIGHT]
# Worker shapes on the poll loop (today's default 8 workers x 1 connection; 2 x 1, what 8 x 1
# does with a larger least tile; 2 x 4; 4 x 2) and LMCache's C++ connector, the order rotating,
# ALTS rounds, on one throwaway server (steady). Per run: one batch.py line (../../2026-12-04/uring).
set -u
KIND=$1 OP=$2 N=$3 SIZE=$4 REPS=$5 ALTS=$6
export INFLIGHT=${7:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
URING=$HERE/../../2026-12-04/uring
REPO=${REPO:-$(cd "$HERE/../../../.." && pwd)}
PY=${PY:-$REPO/.venv/bin/python}
CPP=${CPP:?set CPP to a Python that imports LMCache\'s C++ connector (../shared/peers/lmcache-native/setup.sh DIR: DIR/bin/python)}
PORTFILE=$(mktemp)
cd /tmp
PYTHONPATH=$REPO $PY "$URING/serve.py" "$KIND" steady > "$PORTFILE" &
SP=$!; sleep 1.5; PORT=$(head -1 "$PORTFILE")
one() {  # label workers cpw
  LABEL=$1 W=$2 CPW=$3 OURS_KW='{"io_backend": "poll"}' PYTHONPATH=$REPO $PY "$URING/batch.py" ours "$PORT" "$OP" "$N" "$SIZE" "$REPS" 2>&1 | grep -v Warning
  redis-cli -p "$PORT" flushall >/dev/null
}
for i in $(seq "$ALTS"); do
  set -- w8x1 w2x1 w2x4 w4x2 cpp
  for k in $(seq $(( (i - 1) % 5 ))); do set -- "${@:2}" "$1"; done
  for w in "$@"; do
    case $w in
      w8x1) one 8x1 8 1;; w2x1) one 2x1 2 1;; w2x4) one 2x4 2 4;; w4x2) one 4x2 4 2;;
      cpp) LABEL=cpp $CPP "$URING/batch.py" cpp "$PORT" "$OP" "$N" "$SIZE" "$REPS" 2>/dev/null; redis-cli -p "$PORT" flushall >/dev/null;;
    esac
  done
done
kill $SP; sleep 0.5; redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1; wait 2>/dev/null; rm -f "$PORTFILE"
