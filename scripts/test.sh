#!/usr/bin/env bash
# Every test: set everything up, then the Rust tests (unit, property, fuzz-corpus replay, the
# loom model of the rings, against a real redis-server), clippy, and the Python suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"

echo "==> cargo test (workspace: codec, rings, arena, engine, numa, real-redis tests, fuzz corpus replay)"
cargo test --workspace --quiet

echo "==> clippy (every target, with the python and test-hooks features; warnings are errors)"
cargo clippy --workspace --all-targets --features lmcache-resp/python,lmcache-resp/test-hooks -- -D warnings

echo "==> loom models: the SPSC rings, the batch counter's futex wake-up, the eventfd drain order"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p lmcache-resp --release --lib --quiet loom_tests

scripts/check-wheel.sh
echo "==> pytest (includes mypy.stubtest of the native module and mypy --strict of the package)"
.venv/bin/python -m pytest -q py-tests
