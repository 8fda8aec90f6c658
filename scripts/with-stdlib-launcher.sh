#!/usr/bin/env bash
# Runs a command whose tests start servers through native-tests' launcher (`python -m
# lmcache_resp_testing`) with that launcher on the system's python3, the standard library alone,
# where `import lmcache_resp` fails: a folder first on PYTHONPATH holds an lmcache_resp that
# raises ImportError. So every server those tests start proves that the launcher
# (lmcache_resp_servers and the test-support package's command line) needs nothing built:
# no lmcache_resp._native, no .venv.
#
#   scripts/with-stdlib-launcher.sh cargo test -p lmcache-resp-native-tests --test tls_harness
#
# scripts/test.sh runs the workspace's Rust tests on Redis 7.0 this way. The Valkey choices
# (REDIS_TEST_SERVER=valkey|valkey9) need their PyPI packages, which this Python lacks.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)

# The system's Python, not a virtual environment's: /usr/bin/python3 where there is one.
python=/usr/bin/python3
[ -x "$python" ] || python=$(command -v python3)
guard=$(mktemp -d)
trap 'rm -rf "$guard"' EXIT
mkdir "$guard/lmcache_resp"
cat >"$guard/lmcache_resp/__init__.py" <<'PY'
raise ImportError(
    "lmcache_resp is shadowed here (scripts/with-stdlib-launcher.sh): the server launcher must run on the "
    "standard library alone (lmcache_resp_servers, testing/lmcache_resp_testing's command line)"
)
PY
path=$guard${PYTHONPATH:+:$PYTHONPATH}

# The guard itself, first: lmcache_resp (checkout and all) cannot be imported, the launcher can.
# From the guard's folder: `python -c` and `-m` put the working directory first on the path.
if (cd "$guard" && PYTHONPATH=$path:$repo/testing:$repo "$python" -c 'import lmcache_resp') 2>/dev/null; then
    echo "error: $python still imports lmcache_resp with $guard first on PYTHONPATH" >&2
    exit 1
fi
(cd "$guard" && PYTHONPATH=$path:$repo/testing:$repo "$python" -c 'import lmcache_resp_servers, lmcache_resp_testing.cli') || {
    echo "error: $python cannot import the launcher with the standard library alone" >&2
    exit 1
}
echo "==> the server launcher on $python ($("$python" -c 'import sys; print(sys.version.split()[0])')), lmcache_resp shadowed"
LMCACHE_RESP_PYTHON=$python PYTHONPATH=$path "$@"
