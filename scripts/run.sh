#!/usr/bin/env bash
# The main job: set everything up, then run against a throwaway local redis-server.
# Extra arguments are passed on.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
exec .venv/bin/python -m lmcache_resp.demo "$@"
