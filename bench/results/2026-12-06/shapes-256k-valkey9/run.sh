#!/usr/bin/env bash
# ABBA of whole runs: 8x1, 2x4, 2x4, 8x1 (each ours vs resp in one run), Valkey 9.1, 256 KiB cells.
# REPO: the checkout (default: this script's); LMC: LMCache's Python (default: what
# scripts/test-lmcache.sh builds); OUT: where the outputs go (default: this folder).
set -u
REPO=${REPO:-$(cd "$(dirname "$0")/../../../.." && pwd)}
LMC=${LMC:-$REPO/target/lmcache-0.5.6/venv/bin/python}
OUT=${OUT:-$(cd "$(dirname "$0")" && pwd)}
cd "$REPO"
i=0
for shape in 8x1 2x4 2x4 8x1; do
    i=$((i + 1))
    extra=()
    [ "$shape" = 2x4 ] && extra=(--ours-shape 2x4)
    echo "### run $i: $shape ($(date -u +%H:%M) UTC)"
    LMCACHE_RESP_IO_BACKEND=poll .venv/bin/python -m lmcache_resp.bench --compare lmcache-l2 --lmcache-python "$LMC" \
        --server valkey9 --l2-adapters ours,resp --l2-cells 256K,256Kx8 --l2-in-flight 1 --rounds 6 --l2-bench-rounds 10 \
        "${extra[@]}" > "$OUT/valkey9-256k-run$i-$shape.txt" 2>&1
    echo "    exit $?"
done
