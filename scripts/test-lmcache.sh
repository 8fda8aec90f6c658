#!/usr/bin/env bash
# Tests lmcache-resp inside real LMCache releases, 0.5.6 and 0.5.7rc2 (torch on CPU, throwaway
# redis-servers), one venv each. Large (about 6.5 GB of wheels per venv, mostly torch's CUDA
# libraries), so it is kept out of scripts/test.sh and CI. Safe to run again: a second run
# reuses the environments.
#
#   scripts/test-lmcache.sh [--lmcache VERSION]... [pytest args...]   e.g. --lmcache 0.5.7rc2 -k non_mp
#
# Without --lmcache it runs every version of LMCACHE_VERSIONS (default "0.5.6 0.5.7rc2") in turn
# and fails if any fails. What differs between the versions, for us: docs/lmcache.md, "LMCache
# 0.5.6 and 0.5.7".
#
# What it does, per version:
#   1. a venv (target/lmcache-VERSION/venv; LMCACHE_VENV=... moves it where one version runs)
#      with torch 2.15.0, that lmcache and valkey-glide-sync (for LMCache's `valkey` adapter)
#      from PyPI, then this project, built and installed (pip .)
#   2. LMCache's own tests, from that version's sdist (target/lmcache-VERSION/upstream)
#   3. pytest lmcache-tests/ (their servers from the test-support package, testing/ on the path): (a) MP, the native_plugin L2 adapter through create_l2_adapter and
#      `lmcache server`; (b) non-MP, the remote storage plugin through LMCache's config loader,
#      CreateStorageBackends/CreateConnector; (c) LMCache's L2-adapter and RESP tests with
#      lmcache-resp substituted; (d) MP end to end: a real `lmcache server` driven by LMCache's
#      MP scheduler/worker adapters on CPU KV caches, Redis killed, restarted, a wrong password;
#      (e) namespaces shared with LMCache's own `valkey` adapter (key_prefix, ttl_seconds).
#
# Why torch from PyPI with all its dependencies: LMCache's extension modules link against
# libtorch, and PyPI's Linux torch wheels are CUDA builds whose libtorch needs the nvidia-*
# wheels to load at all (download.pytorch.org's CPU wheels are the small alternative where that
# index is reachable: TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu). No GPU is used.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

VERSIONS=()
while [ $# -gt 0 ] && [ "$1" = --lmcache ]; do
    [ $# -ge 2 ] || { echo "--lmcache needs a version (0.5.6, 0.5.7rc2)" >&2; exit 2; }
    VERSIONS+=("$2")
    shift 2
done
[ ${#VERSIONS[@]} -gt 0 ] || read -r -a VERSIONS <<< "${LMCACHE_VERSIONS:-0.5.6 0.5.7rc2}"
if [ ${#VERSIONS[@]} -gt 1 ]; then
    if [ -n "${LMCACHE_VENV:-}" ]; then
        echo "LMCACHE_VENV names one venv: give one --lmcache VERSION with it" >&2
        exit 2
    fi
    # Each version in a run of its own, so that any failing step stops that version only.
    FAILED=()
    for version in "${VERSIONS[@]}"; do
        echo "==> LMCache $version"
        "$0" --lmcache "$version" "$@" || FAILED+=("$version")
    done
    if [ ${#FAILED[@]} -gt 0 ]; then
        echo "==> lmcache-tests failed against LMCache ${FAILED[*]}" >&2
        exit 1
    fi
    echo "==> lmcache-tests passed against LMCache ${VERSIONS[*]}"
    exit 0
fi
LMCACHE_VERSION=${VERSIONS[0]}
WORK=$REPO/target/lmcache-$LMCACHE_VERSION
VENV=${LMCACHE_VENV:-$WORK/venv}
TORCH_VERSION=${TORCH_VERSION:-2.15.0}
PYTHON=${PYTHON:-python3}

. scripts/lib/engine-venv.sh
ensure_project_setup

require_python 11 13 "lmcache 0.5.6/0.5.7 wheels, abi3 >= 3.11 here"

mkdir -p "$WORK"
make_venv "$VENV"

if ! installed "$VENV" lmcache "$LMCACHE_VERSION"; then
    echo "==> installing torch $TORCH_VERSION and lmcache $LMCACHE_VERSION (large: CUDA libraries come with torch)"
    if [ -n "${TORCH_INDEX_URL:-}" ]; then
        "${PIP[@]}" install -q "torch==$TORCH_VERSION" --index-url "$TORCH_INDEX_URL"
    else
        "${PIP[@]}" install -q "torch==$TORCH_VERSION"
    fi
    # numpy: lmcache 0.5.6 and 0.5.7rc2 require numpy<=2.2.6
    "${PIP[@]}" install -q "lmcache==$LMCACHE_VERSION" "numpy==2.2.6"
fi
# valkey-glide-sync: LMCache's own `valkey` L2 adapter (valkey_l2_adapter.py) needs it, and the
# namespace tests (test_e) check that it and ours share keys.
"${PIP[@]}" install -q "pytest-timeout>=2" "valkey-glide-sync==${VALKEY_GLIDE_VERSION:-2.6.0}"

echo "==> building and installing lmcache-resp into $VENV"
"${PIP[@]}" install -q "$REPO"

UPSTREAM=$WORK/upstream
if [ ! -d "$UPSTREAM/tests" ]; then
    echo "==> fetching LMCache $LMCACHE_VERSION's tests (its sdist)"
    rm -rf "$WORK/sdist" "$UPSTREAM"
    mkdir -p "$WORK/sdist" "$UPSTREAM"
    # --no-build-isolation: the venv already has LMCache's build requirements (setuptools_scm, torch)
    "${PIP[@]}" download -q --no-deps --no-binary :all: --no-build-isolation \
        "lmcache==$LMCACHE_VERSION" -d "$WORK/sdist"
    tar -xzf "$WORK/sdist/lmcache-$LMCACHE_VERSION.tar.gz" -C "$WORK/sdist"
    # Only the tests and their pytest.ini: the installed wheel is what they must import.
    cp -r "$WORK/sdist/lmcache-$LMCACHE_VERSION/tests" "$WORK/sdist/lmcache-$LMCACHE_VERSION/pytest.ini" "$UPSTREAM/"
fi

echo "==> pytest lmcache-tests (real LMCache $LMCACHE_VERSION, throwaway redis-servers)"
# The tests' servers come from the installed launcher (lmcache_resp_servers, in the wheel beside
# lmcache_resp), what only tests add from the test-support package (testing/lmcache_resp_testing,
# never installed: pyproject.toml's pytest `pythonpath` puts testing/ on the path). Checked here
# the same way: testing/ first, not the repository root.
PYTHONPATH="$REPO/testing" "$VENV/bin/python" -P -c "
import torch, lmcache, lmcache_resp, lmcache_resp_servers, lmcache_resp_testing.servers
assert '$REPO/lmcache_resp' not in lmcache_resp.__file__, lmcache_resp.__file__
assert '$REPO/lmcache_resp_servers' not in lmcache_resp_servers.__file__, lmcache_resp_servers.__file__
print('torch', torch.__version__, '| lmcache', '$LMCACHE_VERSION', '| lmcache_resp', lmcache_resp.__version__,
      '| test support', lmcache_resp_testing.__file__)"
# The pytest entry point, not `python -m pytest`: the repository root must not shadow the
# installed lmcache_resp (its source tree has no built extension).
export LMCACHE_UPSTREAM_TESTS=$UPSTREAM LMCACHE_TRACK_USAGE=false LMCACHE_DISABLE_BANNER=1
exec "$VENV/bin/pytest" -q -p no:cacheprovider -o timeout=900 -o log_cli=false \
    -W ignore::FutureWarning -W ignore::DeprecationWarning lmcache-tests "$@"
