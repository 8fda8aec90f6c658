#!/bin/bash
out=/work/main/bench/results/2026-12-02/after
l2() { local name=$1; shift
  echo "### $name: python -m lmcache_resp.bench --compare lmcache-l2 --lmcache-python LMCACHE_PY $* ($(date -u +%H:%M) UTC)" | tee -a "$out/after.log"
  /usr/bin/time -f "    (%e s)" /work/main/.venv/bin/python -m lmcache_resp.bench --compare lmcache-l2 --lmcache-python /work/lmc-venv/bin/python "$@" > "$out/$name.txt" 2> "$out/$name.err"
  echo "    exit $? $(tail -1 "$out/$name.err")" | tee -a "$out/after.log"; }
for server in redis valkey9 valkey; do
  l2 "$server-steady-if1" --server $server --regime steady --l2-adapters ours,resp --l2-cells 256K,1M,4M,32Mx8 --l2-in-flight 1 --rounds 4 --l2-bench-rounds 10
done
l2 cluster3-steady-if1 --cluster 3 --regime steady --l2-adapters ours,valkey --l2-cells 256K,1M,4M,32Mx8 --l2-in-flight 1 --rounds 4 --l2-bench-rounds 10
