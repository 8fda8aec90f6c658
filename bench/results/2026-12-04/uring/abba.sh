#!/bin/bash
# usage: abba.sh KIND REGIME OP N SIZE REPS ALTS [INFLIGHT]
# One throwaway server (KIND: redis | valkey9; REGIME: steady | fresh); ALTS rounds, each running
# the poll loop, the io_uring loop and LMCache's C++ connector once, the order rotating
# (poll uring cpp / uring cpp poll / cpp poll uring); the keys flushed between runs.
# Ours: this checkout's build (PYTHONPATH=the checkout, its .venv; REPO and PY to change them);
# cpp: $CPP, a Python that imports LMCache's C++ connector (lmcache.lmcache_redis).
set -u
KIND=$1 REGIME=$2 OP=$3 N=$4 SIZE=$5 REPS=$6 ALTS=$7
export INFLIGHT=${8:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=${REPO:-$(cd "$HERE/../../../.." && pwd)}
PY=${PY:-$REPO/.venv/bin/python}
CPP=${CPP:?set CPP to a Python that imports LMCache\'s C++ connector (../shared/peers/lmcache-native/setup.sh DIR: DIR/bin/python)}
PORTFILE=$(mktemp)
cd /tmp
PYTHONPATH=$REPO $PY "$HERE/serve.py" "$KIND" "$REGIME" > "$PORTFILE" &
SP=$!; sleep 1.5; PORT=$(head -1 "$PORTFILE")
for i in $(seq "$ALTS"); do
  case $((i % 3)) in 1) order="poll uring cpp";; 2) order="uring cpp poll";; 0) order="cpp poll uring";; esac
  for w in $order; do
    case $w in
      poll|uring) LABEL=$w OURS_KW="{\"io_backend\": \"$w\"}" PYTHONPATH=$REPO $PY "$HERE/batch.py" ours "$PORT" "$OP" "$N" "$SIZE" "$REPS" 2>&1 | grep -v Warning;;
      cpp) LABEL=cpp $CPP "$HERE/batch.py" cpp "$PORT" "$OP" "$N" "$SIZE" "$REPS" 2>/dev/null;;
    esac
    redis-cli -p "$PORT" flushall >/dev/null
  done
done
kill $SP; sleep 0.5; redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1; wait 2>/dev/null; rm -f "$PORTFILE"
