#!/bin/bash
# #38's matrix through LMCache's own `lmcache bench l2`: our adapter on the poll loop (8 x 1, the
# default), on the io_uring loop (8 x 1) and on the poll loop as 2 workers x 4 connections, each
# against LMCache's C++ `resp` adapter (8 threads) in the same run, ABBA.
#   REPO=<checkout with a built lmcache_resp> PY=<its python> LMC=<LMCache 0.5.6 python> matrix.sh SERVER CELLS INFLIGHT ROUNDS BENCH_ROUNDS TAG
# Outputs SERVER-TAG-<variant>.txt beside this script; run from /tmp so the checkout is taken from PYTHONPATH.
set -u
SERVER=$1 CELLS=$2 INFLIGHT=$3 ROUNDS=$4 BENCH_ROUNDS=$5 TAG=$6
HERE=$(cd "$(dirname "$0")" && pwd)
cd /tmp
run() {  # variant, then extra arguments; LMCACHE_RESP_IO_BACKEND reaches our adapter in LMCache's process
  local variant=$1 backend=$2; shift 2
  echo "### $SERVER $variant: LMCACHE_RESP_IO_BACKEND=$backend python -m lmcache_resp.bench --compare lmcache-l2 --server $SERVER --l2-adapters ours,resp --l2-cells $CELLS --l2-in-flight $INFLIGHT --rounds $ROUNDS --l2-bench-rounds $BENCH_ROUNDS $* ($(date -u +%H:%M) UTC)"
  LMCACHE_RESP_IO_BACKEND=$backend PYTHONPATH=$REPO "$PY" -m lmcache_resp.bench --compare lmcache-l2 --lmcache-python "$LMC" \
    --server "$SERVER" --l2-adapters ours,resp --l2-cells "$CELLS" --l2-in-flight "$INFLIGHT" --rounds "$ROUNDS" \
    --l2-bench-rounds "$BENCH_ROUNDS" "$@" > "$HERE/$SERVER-$TAG-$variant.txt" 2>&1
  echo "    exit $?"
}
run poll8x1 poll
run uring8x1 uring
run poll2x4 poll --ours-shape 2x4
