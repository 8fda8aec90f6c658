#!/bin/bash
# The steady rows at 1 in flight and the cluster row of RESULTS.md sections 1 and 2, again on the
# final build of 2026-12-02 (1e1a2bd); outputs NAME.txt, NAME.err and after.log beside this script.
#   [PY=<python with lmcache_resp>] [LMC=<python with LMCache 0.5.6>] after.sh
# PY: default the checkout's .venv (scripts/setup.sh); LMC: default what scripts/test-lmcache.sh builds.
set -u
out=$(cd "$(dirname "$0")" && pwd)
REPO=${REPO:-$(cd "$out/../../../.." && pwd)}
PY=${PY:-$REPO/.venv/bin/python}
LMC=${LMC:-$REPO/target/lmcache-0.5.6/venv/bin/python}
l2() { local name=$1; shift
  echo "### $name: python -m lmcache_resp.bench --compare lmcache-l2 --lmcache-python LMCACHE_PY $* ($(date -u +%H:%M) UTC)" | tee -a "$out/after.log"
  /usr/bin/time -f "    (%e s)" "$PY" -m lmcache_resp.bench --compare lmcache-l2 --lmcache-python "$LMC" "$@" > "$out/$name.txt" 2> "$out/$name.err"
  echo "    exit $? $(tail -1 "$out/$name.err")" | tee -a "$out/after.log"; }
for server in redis valkey9 valkey; do
  l2 "$server-steady-if1" --server $server --regime steady --l2-adapters ours,resp --l2-cells 256K,1M,4M,32Mx8 --l2-in-flight 1 --rounds 4 --l2-bench-rounds 10
done
l2 cluster3-steady-if1 --cluster 3 --regime steady --l2-adapters ours,valkey --l2-cells 256K,1M,4M,32Mx8 --l2-in-flight 1 --rounds 4 --l2-bench-rounds 10
