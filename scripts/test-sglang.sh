#!/usr/bin/env bash
# Tests lmcache-resp inside a real SGLang 0.5.23 (torch on CPU, a throwaway redis-server): SGLang's
# own host pools, its backend loader and its cache controller's page methods drive
# lmcache_resp.sglang.RespHiCacheStorage, every byte verified (sglang-tests/). Large (torch's CUDA
# wheels), so it is kept out of scripts/test.sh and CI. Safe to run again: a second run reuses the
# environment.
#
#   scripts/test-sglang.sh [pytest args...]      e.g. -k mla, -x
#
# What it installs (default target/sglang-0.5.23/venv; SGLANG_VENV=... to move it):
#   - torch 2.14.1 (SGLang 0.5.23's pin) from PyPI, with its nvidia-* wheels: PyPI's Linux torch
#     is a CUDA build whose libtorch needs them to load (TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
#     takes the small CPU build where that index is reachable). No GPU is used.
#   - sglang 0.5.23 with --no-deps, and only what its storage path imports (the list below, SGLang's
#     pins where it has them): the whole of SGLang's requirements is CUDA kernels, attention
#     libraries and a server stack the host pool and the storage backends never touch.
#   - ninja: SGLang compiles its page-hash extension (hicache_hash_cpp) with torch's C++ extension
#     builder on first use (into $TORCH_EXTENSIONS_DIR, default inside the venv).
#   - this project, built and installed (pip .).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

SGLANG_VERSION=0.5.23
TORCH_VERSION=${TORCH_VERSION:-2.14.1}
WORK=$REPO/target/sglang-$SGLANG_VERSION
VENV=${SGLANG_VENV:-$WORK/venv}
PYTHON=${PYTHON:-python3}
# What sglang's storage path (host pools, backend factory, cache controller) imports, beyond torch.
STORAGE_PATH_DEPS=(
    numpy msgspec orjson psutil pybase64 requests packaging pillow starlette pydantic pyzmq tqdm IPython aiohttp
    dill gguf torchvision "transformers==5.19.0" "sentencepiece==0.2.1" "compressed-tensors==0.18.0"
    "apache-tvm-ffi==0.1.11" ninja
)

. scripts/lib/engine-venv.sh
ensure_project_setup

require_python 11 "" "sglang 0.5.23's wheels"

mkdir -p "$WORK"
make_venv "$VENV"

if ! installed "$VENV" sglang "$SGLANG_VERSION"; then
    echo "==> installing torch $TORCH_VERSION, sglang $SGLANG_VERSION (--no-deps) and its storage path's imports"
    if [ -n "${TORCH_INDEX_URL:-}" ]; then
        "${PIP[@]}" install -q "torch==$TORCH_VERSION" --index-url "$TORCH_INDEX_URL"
    else
        "${PIP[@]}" install -q "torch==$TORCH_VERSION"
    fi
    "${PIP[@]}" install -q --no-deps "sglang==$SGLANG_VERSION"
    "${PIP[@]}" install -q "${STORAGE_PATH_DEPS[@]}" "torch==$TORCH_VERSION"
fi
"${PIP[@]}" install -q "pytest>=8" "pytest-timeout>=2" "redis>=5"

echo "==> building and installing lmcache-resp into $VENV"
"${PIP[@]}" install -q "$REPO"

echo "==> pytest sglang-tests (real SGLang $SGLANG_VERSION classes on CPU, throwaway redis-servers)"
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$VENV/torch_extensions}
export PATH="$VENV/bin:$PATH"   # torch's extension builder runs `ninja`
PYTHONPATH="$REPO/testing" "$VENV/bin/python" -P -c "
import torch, sglang, lmcache_resp, lmcache_resp_servers, lmcache_resp_testing.servers
assert '$REPO/lmcache_resp' not in lmcache_resp.__file__, lmcache_resp.__file__
assert '$REPO/lmcache_resp_servers' not in lmcache_resp_servers.__file__, lmcache_resp_servers.__file__
print('torch', torch.__version__, '| sglang', sglang.__version__, '| lmcache_resp', lmcache_resp.__version__)"
# The pytest entry point, not `python -m pytest`: the repository root must not shadow the
# installed lmcache_resp (its source tree has no built extension).
PYTHONPATH="$REPO/testing" exec "$VENV/bin/pytest" -q -p no:cacheprovider -o timeout=600 -o log_cli=false \
    -W ignore::UserWarning -W ignore::DeprecationWarning sglang-tests "$@"
