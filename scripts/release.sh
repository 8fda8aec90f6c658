#!/usr/bin/env bash
# Builds the release wheel into dist/: a manylinux_2_34 x86_64 abi3 wheel whose native module
# carries hwloc inside it (linked statically), so it installs and runs on a machine with no
# hwloc and no libudev. Needs what scripts/setup.sh installs (a C toolchain, pkg-config, Rust,
# maturin in .venv). The README's "Release" section says why it is built this way.
#
#   scripts/release.sh        # -> dist/lmcache_resp-<version>-cp311-abi3-manylinux_2_34_x86_64.whl
#
# manylinux_2_34 is the lowest tag a build on Debian 12 (glibc 2.36) satisfies: Rust's standard
# library links pthread_create & co., which glibc 2.34 moved into libc.so.6 and versioned
# GLIBC_2.34. maturin checks the symbol versions against the tag, and `--auditwheel check`
# makes it fail, rather than bundle copies, if the module needs any shared library outside the
# manylinux policy.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"

maturin=${MATURIN:-}
if [ -z "$maturin" ]; then
    if [ -x .venv/bin/maturin ]; then maturin=.venv/bin/maturin; else maturin=maturin; fi
fi

hwloc_prefix=$(scripts/build-hwloc.sh)

rm -f dist/lmcache_resp-*.whl
echo "==> building the release wheel (static hwloc from $hwloc_prefix)"
# pkg-config finds the static hwloc first; hwlocality-sys asks pkg-config for a static link and
# takes libhwloc.a because it lies outside /usr. A target directory of its own keeps this build
# from invalidating the development build (linked to the system's hwloc) and the other way round.
PKG_CONFIG_PATH="$hwloc_prefix/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}" \
    CARGO_TARGET_DIR="$PWD/target/wheel" \
    "$maturin" build --release --locked --compatibility manylinux_2_34 --auditwheel check --out dist

ls -l dist/lmcache_resp-*.whl
