#!/bin/bash
# #27's full matrix through LMCache's own benchmark, in one window: three servers x two memory
# regimes x four cells x in flight 1 and 4, ours against LMCache's `resp` adapter (4
# alternations), then ours against LMCache's `valkey` adapter on a 3-primary cluster.
# usage: matrix.sh OUTDIR   (run from a directory outside the checkout, so that
# `-m lmcache_resp.bench` takes the installed package)
set -u
out=${1:?OUTDIR}
mkdir -p "$out"
REPO=${REPO:-$(cd "$(dirname "$0")/../../../.." && pwd)}
MAIN=${MAIN:-$REPO/.venv/bin/python}                      # a Python with lmcache_resp (scripts/setup.sh)
LMC=${LMC:-$REPO/target/lmcache-0.5.6/venv/bin/python}    # a Python with LMCache 0.5.6 (scripts/test-lmcache.sh)
l2() { # name args...
    local name=$1; shift
    echo "### $name: python -m lmcache_resp.bench --compare lmcache-l2 --lmcache-python LMCACHE_PY $*" | tee -a "$out/matrix.log"
    /usr/bin/time -f "    (%e s)" "$MAIN" -m lmcache_resp.bench --compare lmcache-l2 --lmcache-python "$LMC" \
        "$@" > "$out/$name.txt" 2> "$out/$name.err"
    echo "    exit $? $(tail -1 "$out/$name.err")" | tee -a "$out/matrix.log"
}
[ "${RERUN_STOPPED:-0}" = 1 ] || for server in redis valkey valkey9; do
    for regime in steady fresh; do
        l2 "$server-$regime-if1" --server $server --regime $regime --l2-adapters ours,resp \
            --l2-cells 256K,1M,4M,32Mx8 --l2-in-flight 1 --rounds 4 --l2-bench-rounds 10
        l2 "$server-$regime-if4" --server $server --regime $regime --l2-adapters ours,resp \
            --l2-cells 256K,1M,4M,32Mx8 --l2-in-flight 4 --rounds 4 --l2-bench-rounds 4
    done
done
[ "${RERUN_STOPPED:-0}" = 1 ] || l2 cluster3-steady-if1 --cluster 3 --regime steady --l2-adapters ours,valkey \
    --l2-cells 256K,1M,4M,32Mx8 --l2-in-flight 1 --rounds 4 --l2-bench-rounds 10
# Then, after 439bc6e (a steady Valkey that MEMORY PURGE cannot shrink is restarted): the two rows
# that had stopped at 19 GB (their first outputs kept as *.stopped.*).
if [ "${RERUN_STOPPED:-0}" = 1 ]; then
    for server in valkey valkey9; do
        l2 "$server-steady-if4" --server $server --regime steady --l2-adapters ours,resp \
            --l2-cells 256K,1M,4M,32Mx8 --l2-in-flight 4 --rounds 4 --l2-bench-rounds 4
    done
fi
