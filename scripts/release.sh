#!/usr/bin/env bash
# Builds the release wheels into dist/: for each architecture, one abi3 wheel for CPython 3.11
# and later and one CPython 3.10 wheel, all tagged manylinux_2_28, whose native module carries
# hwloc inside it (linked statically), so they install and run on any Linux with glibc 2.28 or
# later, with no hwloc and no libudev. Needs what scripts/setup.sh installs (a C toolchain,
# pkg-config, Rust, maturin in .venv); it adds the `ziglang` package to .venv and, for aarch64,
# the Rust target aarch64-unknown-linux-gnu (rustup) when they are missing. docs/release.md
# says why it is built this way.
#
#   scripts/release.sh [x86_64|aarch64|all]     # default: all
#   -> dist/lmcache_resp-<version>-cp311-abi3-manylinux_2_28_<arch>.whl   (CPython >= 3.11)
#      dist/lmcache_resp-<version>-cp310-cp310-manylinux_2_28_<arch>.whl  (CPython 3.10)
#
# Two wheels per architecture, not one abi3-py310 wheel: the bindings take and export buffers
# (pyo3::buffer for bytes/bytearray/numpy/torch sources and destinations, and Page's
# __getbuffer__), and the buffer protocol is part of the limited API only from Python 3.11, so
# PyO3 compiles it out of an abi3-py310 build. The 3.10 module is a version-specific build of
# the same code (the crate's default `abi3` feature off); maturin takes the 3.10 interpreter
# configuration from its bundled sysconfig data, so no Python 3.10 is needed to build it.
#
# The toolchain is zig (`maturin build --zig`, the `ziglang` wheel from PyPI): it links against
# glibc 2.28's symbol versions from any build machine and cross-links aarch64 with no Debian
# cross toolchain or arm64 sysroot, and scripts/build-hwloc.sh compiles the static hwloc with
# the same `zig cc` for the same glibc. maturin checks the glibc symbol versions against the
# manylinux_2_28 tag, and `--auditwheel check` makes it fail, rather than bundle copies, if the
# module needs any shared library outside the manylinux policy.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

which=${1:-all}
case "$which" in
    x86_64 | aarch64) arches=("$which") ;;
    all) arches=(x86_64 aarch64) ;;
    *) echo "usage: $0 [x86_64|aarch64|all]" >&2; exit 2 ;;
esac

maturin=${MATURIN:-}
if [ -z "$maturin" ]; then
    if [ -x .venv/bin/maturin ]; then maturin=.venv/bin/maturin; else maturin=maturin; fi
fi
# zig comes from the `ziglang` wheel, run as `python3 -m ziglang`: maturin (cargo-zigbuild)
# finds it through the python3 first on PATH, and scripts/build-hwloc.sh through ZIG_PYTHON.
# ZIG_PYTHON must be a python3 in a directory whose `python3` is itself (a venv's bin/).
ziglang_version=0.17.1
zig_python=${ZIG_PYTHON:-$PWD/.venv/bin/python}
if ! "$zig_python" -m ziglang version >/dev/null 2>&1; then
    echo "==> installing ziglang==$ziglang_version into $("$zig_python" -c 'import sys; print(sys.prefix)')" >&2
    "$zig_python" -m pip install -q --disable-pip-version-check "ziglang==$ziglang_version"
fi
# Its directory first on PATH (not a wrapper in a temporary one: the interpreter's path is part
# of PyO3's build configuration, and a new one every run would rebuild everything).
export ZIG_PYTHON="$zig_python" PATH="$(dirname "$zig_python"):$PATH"

mkdir -p dist
for arch in "${arches[@]}"; do
    triple="$arch-unknown-linux-gnu"
    if ! rustup target list --installed 2>/dev/null | grep -qx "$triple"; then
        echo "==> adding the Rust target $triple (rustup)" >&2
        rustup target add "$triple"
    fi
    hwloc_prefix=$(scripts/build-hwloc.sh "$arch")
    rm -f dist/lmcache_resp-*_"$arch".whl
    # pkg-config finds only the static hwloc for this target (PKG_CONFIG_LIBDIR_<triple>; the
    # *_ALLOW_CROSS lets the pkg-config crate answer for a cross target at all). hwlocality-sys
    # asks pkg-config for a static link and takes libhwloc.a because it lies outside /usr. A
    # target directory of its own keeps this build from invalidating the development build
    # (linked to the system's hwloc) and the other way round.
    env_triple=${triple//-/_}
    build=(
        env "PKG_CONFIG_LIBDIR_$env_triple=$hwloc_prefix/lib/pkgconfig" "PKG_CONFIG_ALLOW_CROSS_$env_triple=1"
        CARGO_TARGET_DIR="$PWD/target/wheel"
        nice "$maturin" build --release --locked --zig --target "$triple" --compatibility manylinux_2_28
        --auditwheel check --out dist
    )
    echo "==> building the $arch abi3 wheel, CPython >= 3.11 (static hwloc from $hwloc_prefix)"
    start=$SECONDS
    "${build[@]}"
    echo "==> building the $arch CPython 3.10 wheel"
    "${build[@]}" --interpreter python3.10 --no-default-features --features python
    echo "==> $arch wheels built in $((SECONDS - start)) s"
done
ls -l dist/lmcache_resp-*.whl
