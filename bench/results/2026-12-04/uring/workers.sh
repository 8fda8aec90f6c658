#!/bin/bash
# usage: workers.sh KIND OP N SIZE REPS ALTS [INFLIGHT]
# Fewer workers, the same 8 data connections: the poll loop and the io_uring loop with 8 workers
# of 1 connection and with 2 workers of 4, and the C++ connector, rotating, ALTS rounds.
set -u
KIND=$1 OP=$2 N=$3 SIZE=$4 REPS=$5 ALTS=$6
export INFLIGHT=${7:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=${REPO:-$(cd "$HERE/../../../.." && pwd)}
PY=${PY:-$REPO/.venv/bin/python}
CPP=${CPP:?set CPP to a Python that imports LMCache\'s C++ connector (../shared/peers/lmcache-native/setup.sh DIR: DIR/bin/python)}
PORTFILE=$(mktemp)
cd /tmp
PYTHONPATH=$REPO $PY "$HERE/serve.py" "$KIND" steady > "$PORTFILE" &
SP=$!; sleep 1.5; PORT=$(head -1 "$PORTFILE")
one() {  # label backend workers cpw
  LABEL=$1 W=$3 CPW=$4 OURS_KW="{\"io_backend\": \"$2\"}" PYTHONPATH=$REPO $PY "$HERE/batch.py" ours "$PORT" "$OP" "$N" "$SIZE" "$REPS" 2>&1 | grep -v Warning
  redis-cli -p "$PORT" flushall >/dev/null
}
for i in $(seq "$ALTS"); do
  set -- p8 u8 p2 u2 cpp
  for k in $(seq $(( (i - 1) % 5 ))); do set -- "${@:2}" "$1"; done
  for w in "$@"; do
    case $w in
      p8) one poll8 poll 8 1;; u8) one uring8 uring 8 1;; p2) one poll2x4 poll 2 4;; u2) one uring2x4 uring 2 4;;
      cpp) LABEL=cpp $CPP "$HERE/batch.py" cpp "$PORT" "$OP" "$N" "$SIZE" "$REPS" 2>/dev/null; redis-cli -p "$PORT" flushall >/dev/null;;
    esac
  done
done
kill $SP; sleep 0.5; redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1; wait 2>/dev/null; rm -f "$PORTFILE"
