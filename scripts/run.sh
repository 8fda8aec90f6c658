#!/usr/bin/env bash
# The main job: set everything up, then run the benchmark (500 x 4 MiB batches, 8 I/O
# workers, every byte verified) against a throwaway local redis-server it starts and stops.
# Extra arguments go to `python -m lmcache_resp.bench` (see --help), e.g. --sweep --plot sweep.png.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
exec .venv/bin/python -m lmcache_resp.bench "$@"
