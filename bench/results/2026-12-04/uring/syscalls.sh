#!/bin/bash
# usage: syscalls.sh KIND OP N SIZE [INFLIGHT]
# System calls and context switches per batch of the whole client process (every thread), for
# the poll loop, the io_uring loop and LMCache's C++ connector: perf stat counts
# raw_syscalls:sys_enter and context-switches over a run of 50 batches and one of 250; the
# difference over 200 is per batch (start-up, connects and the warm-up cancel out).
set -u
KIND=$1 OP=$2 N=$3 SIZE=$4
export INFLIGHT=${5:-1}
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=${REPO:-$(cd "$HERE/../../../.." && pwd)}
PY=${PY:-$REPO/.venv/bin/python}
CPP=${CPP:?set CPP to a Python that imports LMCache\'s C++ connector (../shared/peers/lmcache-native/setup.sh DIR: DIR/bin/python)}
WORK=$(mktemp -d)  # the server's port and perf stat's counts
cd /tmp
PYTHONPATH=$REPO $PY "$HERE/serve.py" "$KIND" steady > "$WORK/serve.port" &
SP=$!; sleep 1.5; PORT=$(head -1 "$WORK/serve.port")
count() {  # who reps -> "syscalls switches"
  local who=$1 reps=$2 out=$WORK/perf-$1-$2.csv
  case $who in
    poll|uring) OURS_KW="{\"io_backend\": \"$who\"}" PYTHONPATH=$REPO perf stat -x, -o $out -e raw_syscalls:sys_enter,context-switches -- $PY "$HERE/batch.py" ours "$PORT" "$OP" "$N" "$SIZE" "$reps" >/dev/null 2>&1;;
    cpp) perf stat -x, -o $out -e raw_syscalls:sys_enter,context-switches -- $CPP "$HERE/batch.py" cpp "$PORT" "$OP" "$N" "$SIZE" "$reps" >/dev/null 2>&1;;
  esac
  redis-cli -p "$PORT" flushall >/dev/null
  awk -F, '/raw_syscalls/ {s=$1} /context-switches/ {c=$1} END {print s, c}' $out
}
for who in poll uring cpp; do
  read s1 c1 < <(count $who 50)
  read s2 c2 < <(count $who 250)
  echo "$who $OP ${N}x$SIZE if$INFLIGHT: syscalls/batch $(( (s2 - s1) / 200 ))  context-switches/batch $(( (c2 - c1) / 200 ))"
done
kill $SP; sleep 0.5; redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1; wait 2>/dev/null; rm -rf "$WORK"
