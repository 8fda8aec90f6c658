#!/bin/bash
# usage: device.sh WHEEL REDIS_SERVER   (writes to $OUT; about 4 minutes; no network needed)
# On a many-core host: the poll loop against the io_uring loop with idle cores, ABBA x4, on one
# redis-server (steady: no memory returned between rounds): 8- and 32-key EXISTS lookups (the
# thread hand-off's cost), 32 x 256 KiB SET and GET at 1 in flight and SET at 4 in flight.
# Each line: batch p50/p90/p99, client CPU per batch and per GB, server CPU, context switches per
# batch (voluntary+involuntary, every thread of the client), batches/s. batch.py is beside this.
set -u
WHEEL=$1 REDIS=$2
OUT=${OUT:-/tmp/h38-device}
mkdir -p "$OUT/site" "$OUT/redis"
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${PYTHON:-python3}
$PY -m pip install -q --no-deps --no-index --target "$OUT/site" "$WHEEL" > "$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
PORT=$((20000 + RANDOM % 20000))
"$REDIS" --port $PORT --bind 127.0.0.1 --save '' --appendonly no --dir "$OUT/redis" --daemonize no > "$OUT/redis.log" 2>&1 &
RP=$!
sleep 1
{
  nproc; uname -r; "$REDIS" --version
  for args in "exists 8 4096 3000 1" "exists 32 4096 3000 1" "set 32 262144 300 1" "get 32 262144 300 1" "set 32 262144 300 4"; do
    set -- $args
    for i in 1 2 3 4; do
      case $((i % 2)) in 1) order="poll uring";; 0) order="uring poll";; esac
      for w in $order; do
        INFLIGHT=$5 LABEL=$w OURS_KW="{\"io_backend\": \"$w\"}" PYTHONPATH="$OUT/site" timeout 60 $PY "$HERE/batch.py" ours $PORT $1 $2 $3 $4 2>&1 | grep -v Warning
      done
    done
  done
} > "$OUT/device.txt" 2>&1
kill $RP; wait 2>/dev/null
cat "$OUT/device.txt"
