#!/bin/bash
# usage: device.sh WHEEL REDIS_SERVER   (writes to $OUT, default a new temporary folder; about 4 minutes; no network needed)
# On a many-core host: the poll loop against the io_uring loop with idle cores, each with 8
# workers of 1 connection and with 2 workers of 4 (the same 8 data connections), rotated x4, on one
# redis-server: 8- and 32-key EXISTS lookups (the thread hand-off's cost), 32 x 256 KiB SET and
# GET at 1 in flight and SET at 4 in flight.
# Each line: batch p50/p90/p99, client CPU per batch and per GB, server CPU, context switches per
# batch (voluntary+involuntary, every thread of the client), batches/s. batch.py is beside this.
set -u
WHEEL=$1 REDIS=$2
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT/site" "$OUT/redis"
HERE=$(cd "$(dirname "$0")" && pwd)
DIV=${DIV:-1}  # DIV=20: a smoke test of the script, not a measurement
PY=${PYTHON:-python3}
$PY -m pip install -q --no-deps --no-index --target "$OUT/site" "$WHEEL" > "$OUT/pip.log" 2>&1 || { cat "$OUT/pip.log"; exit 1; }
PORT=$((20000 + RANDOM % 20000))
"$REDIS" --port $PORT --bind 127.0.0.1 --save '' --appendonly no --dir "$OUT/redis" --daemonize no > "$OUT/redis.log" 2>&1 &
RP=$!
sleep 1
{
  nproc; uname -r; "$REDIS" --version
  # label backend workers connections-per-worker
  one() { INFLIGHT=$5 LABEL=$1 W=$3 CPW=$4 OURS_KW="{\"io_backend\": \"$2\"}" PYTHONPATH="$OUT/site" timeout 90 $PY "$HERE/batch.py" ours $PORT $6 $7 $8 $(( $9 / DIV )) 2>&1 | grep -v Warning; }
  for args in "exists 8 4096 3000 1" "exists 32 4096 3000 1" "set 32 262144 300 1" "get 32 262144 300 1" "set 32 262144 300 4"; do
    set -- $args
    for i in 1 2 3 4; do
      case $((i % 2)) in 1) order="p8 u8 p2 u2";; 0) order="u2 p2 u8 p8";; esac
      for w in $order; do
        case $w in
          p8) one poll8 poll 8 1 $5 $1 $2 $3 $4;; u8) one uring8 uring 8 1 $5 $1 $2 $3 $4;;
          p2) one poll2x4 poll 2 4 $5 $1 $2 $3 $4;; u2) one uring2x4 uring 2 4 $5 $1 $2 $3 $4;;
        esac
      done
    done
  done
} > "$OUT/device.txt" 2>&1
kill $RP; wait 2>/dev/null
cat "$OUT/device.txt"
