#!/usr/bin/env bash
# Sets up everything lmcache-resp needs on a Debian machine; safe to run again.
#   - Debian packages (as root, or through sudo): redis-server, pkg-config, hwloc/udev headers,
#     a C toolchain, python3-venv
#   - Rust through rustup when no cargo is on PATH
#   - a virtual environment in .venv with the build and test tools
#   - the package itself, built in release mode (maturin develop)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(redis-server redis-tools pkg-config libhwloc-dev libudev-dev build-essential bzip2 python3-venv python3-dev curl ca-certificates)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "==> installing Debian packages: ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi

if ! command -v cargo >/dev/null 2>&1; then
    [ -x "$HOME/.cargo/bin/cargo" ] || {
        echo "==> installing Rust (rustup, stable)"
        curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
    }
    export PATH="$HOME/.cargo/bin:$PATH"
fi
# scripts/test.sh runs clippy and rustfmt, which rustup's minimal profile leaves out.
for tool in clippy fmt; do
    if ! cargo "$tool" --version >/dev/null 2>&1; then
        component=$tool
        [ "$tool" = fmt ] && component=rustfmt
        if command -v rustup >/dev/null 2>&1; then
            echo "==> adding rustup's $component component"
            rustup component add "$component"
        else
            echo "warning: cargo $tool is missing and there is no rustup to add $component (scripts/test.sh needs it)" >&2
        fi
    fi
done

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    echo "==> creating .venv"
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -r requirements-dev.txt

echo "==> building lmcache_resp (release)"
VIRTUAL_ENV="$PWD/.venv" PATH="$PWD/.venv/bin:$PATH" .venv/bin/maturin develop --release -q --features python,test-hooks
