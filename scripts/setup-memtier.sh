#!/usr/bin/env bash
# Builds memtier_benchmark (RedisLabs' C++ load generator, the peer of `python -m
# lmcache_resp.bench --compare memtier`) from its source tree, and prints the binary's path.
# Optional, and outside CI: Debian does not package memtier_benchmark, and CI reaches only the
# package registries, so nothing the tests need depends on it.
#
#   scripts/setup-memtier.sh SOURCE_DIR [PREFIX]      # PREFIX defaults to <repository>/target/memtier
#
# SOURCE_DIR is a checkout of https://github.com/RedisLabs/memtier_benchmark, e.g.
#   git clone --branch 2.3.0 --depth 1 https://github.com/RedisLabs/memtier_benchmark
# (2.3.0, commit 1655c39, is the release this project measured with; a later one should do).
#
# The tree is copied into PREFIX/build and built there (autoreconf -ivf, ./configure, make), so
# the checkout is never written to; the binary is installed as PREFIX/bin/memtier_benchmark.
# Safe to run again: when PREFIX holds a binary built from the same source (its files' SHA-256),
# nothing is rebuilt. Debian's autotools, libevent-dev, libssl-dev, zlib1g-dev and pkg-config are
# installed first where missing (as root, or through sudo).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: $0 SOURCE_DIR [PREFIX]   (SOURCE_DIR: a checkout of https://github.com/RedisLabs/memtier_benchmark)" >&2
    exit 2
fi
source_dir=$(cd "$1" && pwd)
if [ ! -f "$source_dir/configure.ac" ] || [ ! -f "$source_dir/memtier_benchmark.cpp" ]; then
    echo "error: $source_dir is not a memtier_benchmark source tree (no configure.ac / memtier_benchmark.cpp);" \
        "clone https://github.com/RedisLabs/memtier_benchmark" >&2
    exit 2
fi
prefix=${2:-$repo/target/memtier}
mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
binary=$prefix/bin/memtier_benchmark

# What the build is made from: every file of the tree but git's own, so an edit rebuilds.
fingerprint=$(cd "$source_dir" && find . -path ./.git -prune -o -type f -print0 | LC_ALL=C sort -z |
    xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
stamp=$prefix/.source-sha256
if [ -x "$binary" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$fingerprint" ] && "$binary" --version >/dev/null 2>&1; then
    echo "==> memtier_benchmark is already built from this source" >&2
    echo "$binary"
    exit 0
fi

packages=(autoconf automake libtool make g++ pkg-config libevent-dev libssl-dev zlib1g-dev)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "==> installing Debian packages: ${missing[*]}" >&2
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi

build=$prefix/build
rm -rf "$build"
mkdir -p "$build"
(cd "$source_dir" && tar --exclude=./.git -cf - .) | tar -xf - -C "$build"
echo "==> building memtier_benchmark in $build" >&2
(
    cd "$build"
    # Its version.sh stamps the binary with the sha of the git repository it is built in: not
    # the one PREFIX may sit in (this one, with the default PREFIX).
    export GIT_CEILING_DIRECTORIES=$prefix
    autoreconf -ivf >&2
    ./configure --prefix="$prefix" >&2
    make -j"$(nproc)" >&2
    make install >&2
)
"$binary" --version >&2
echo "$fingerprint" >"$stamp"
echo "$binary"
