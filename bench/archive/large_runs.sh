#!/usr/bin/env bash
# Side by side with LMCache's connector at 8, 32 and 80 MiB, with and without ranged reads, on
# Redis 7.0.15 and Valkey 8.1.8. One run at a time, nothing else on the machine.
set -u
cd "$(dirname "$0")/.."
out=bench/results/large
for server in redis valkey; do
  for spec in "8 128" "32 32" "80 12"; do
    set -- $spec; mb=$1; keys=$2
    for pieces in default 0; do
      extra=""; [ "$pieces" = 0 ] && extra="--get-piece-mb 0"
      f=$out/2026-12-01-$server-${mb}mib-pieces-$pieces.txt
      timeout 900 .venv/bin/python -m lmcache_resp.bench --server $server --chunk-mb $mb --num-keys $keys --rounds 4 \
        --compare lmcache --lmcache-python "${LMCACHE_PYTHON:?set LMCACHE_PYTHON to a Python that imports LMCache\'s C++ connector}" $extra > $f 2>&1
      echo "$f: $(grep -E '^  (SET|GET) \(GB/s\)' $f | tr -s ' ' | tr '\n' ' ')"
    done
  done
done
