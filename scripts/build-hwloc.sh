#!/usr/bin/env bash
# Builds a static, position-independent libhwloc for the release wheel of one architecture and
# prints the prefix it installed into (lib/libhwloc.a, lib/pkgconfig/hwloc.pc, include/). Safe to
# run again: a finished build is reused. scripts/release.sh points pkg-config at it, so
# hwlocality-sys links hwloc statically and the wheel's module needs no libhwloc (nor libudev)
# on the target machine.
#
#   scripts/build-hwloc.sh x86_64|aarch64    # -> target/hwloc/<arch>/hwloc-2.9.0-static
#
# The compiler is zig's `cc` (the `ziglang` package from PyPI, in .venv: ZIG_PYTHON names
# another Python that has it) targeting <arch>-linux-gnu with glibc 2.28, the same toolchain
# and glibc that `maturin build --zig --compatibility manylinux_2_28` links the module with:
# the library references no glibc symbol newer than 2.28, and aarch64 is a plain cross build
# (configure --host=aarch64-linux-gnu) with no Debian cross toolchain or arm64 sysroot.
#
# The source is hwloc's own release tarball, as Debian 12 ships it in its `hwloc` source
# package (2.9.0-1, whose orig tarball is upstream's hwloc-2.9.0.tar.bz2). It is fetched with
# `apt-get source` into a private apt state under target/, so the machine's apt configuration
# is not touched, and checked against a pinned SHA-256. HWLOC_TARBALL=/path/to/hwloc-2.9.0.tar.bz2
# uses a local copy instead (e.g. on a machine that is not Debian).
#
# Why not hwlocality's `vendored` feature: its build script downloads the hwloc tarball from
# hwloc's own web site at build time and regenerates the build system with autoreconf. CI and
# the development machines reach only the package registries (crates.io, PyPI, Debian), so that
# download fails there.
#
# hwloc is configured for what lmcache-resp uses: CPU/NUMA topology, binding, and Linux I/O
# discovery (PCI devices and network/OpenFabrics OS devices from sysfs, which NIC locality
# needs). Everything that would pull in another shared library is off: libudev, libpciaccess,
# libxml2 (hwloc's built-in XML parser reads the XML topologies), CUDA/OpenCL/NVML/ROCm/Level
# Zero/GL, cairo and plugin loading.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/debian-apt.sh
. scripts/lib/debian-apt.sh

arch=${1:-}
case "$arch" in
    x86_64 | aarch64) ;;
    *) echo "usage: $0 x86_64|aarch64" >&2; exit 2 ;;
esac
glibc=2.28
zig_target="$arch-linux-gnu.$glibc"
zig_python=${ZIG_PYTHON:-$PWD/.venv/bin/python}

version=2.9.0
debian_version=2.9.0-1
sha256=b3fb1a43a14d8fbcd8e976de5ede2ea7ce1d768ed173adb33c7ceaaf098dc970
work="$PWD/target/hwloc"
prefix="$work/$arch/hwloc-$version-static"
configure_flags=(
    --enable-static --disable-shared --with-pic
    --disable-libudev --disable-libxml2 --disable-cairo --without-x
    --disable-opencl --disable-cuda --disable-nvml --disable-rsmi --disable-levelzero --disable-gl
    --disable-plugin-dlopen --disable-plugin-ltdl --disable-doxygen --disable-readme
    --disable-dependency-tracking
    # Linux PCI discovery reads sysfs; keep hwloc from also linking libpciaccess if it is installed.
    ac_cv_header_pciaccess_h=no
)
stamp="$prefix/.built-with"
signature="$version $zig_target ${configure_flags[*]}"

log() { echo "$@" >&2; }

if [ -f "$prefix/lib/libhwloc.a" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$signature" ]; then
    echo "$prefix"
    exit 0
fi

mkdir -p "$work"
tarball="$work/hwloc_$version.orig.tar.bz2"
if [ -n "${HWLOC_TARBALL:-}" ]; then
    cp "$HWLOC_TARBALL" "$tarball"
elif ! echo "$sha256  $tarball" | sha256sum --check --status 2>/dev/null; then
    log "==> fetching hwloc $debian_version source (apt-get source, private apt state in $work/apt)"
    apt="$work/apt"
    rm -rf "$apt"
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial"
    debian_main_mirror "; set HWLOC_TARBALL to hwloc-$version.tar.bz2" || exit 1
    # The Debian mirror this machine already uses, as a deb-src entry for the release's main.
    echo "deb-src ${keyring:+[signed-by=$keyring] }$mirror $codename main" >"$apt/sources.list"
    private_apt_options "$apt"
    apt_opts=("${private_apt_opts[@]}")
    apt-get "${apt_opts[@]}" update >&2
    (cd "$apt" && apt-get "${apt_opts[@]}" source --download-only "hwloc=$debian_version" >&2)
    cp "$apt/hwloc_$version.orig.tar.bz2" "$tarball"
    rm -rf "$apt"
fi
echo "$sha256  $tarball" | sha256sum --check --status || {
    log "error: $tarball is not hwloc $version (SHA-256 mismatch)"
    exit 1
}

"$zig_python" -m ziglang version >/dev/null 2>&1 || {
    log "error: $zig_python has no ziglang (pip install ziglang; scripts/release.sh installs it into .venv)"
    exit 1
}
log "==> building static hwloc $version for $zig_target (zig cc) into $prefix"
# One-word wrappers: configure and libtool take CC/AR/RANLIB as single commands.
bin="$work/$arch/bin"
rm -rf "$work/$arch/src" "$prefix" "$bin"
mkdir -p "$work/$arch/src" "$bin"
for tool in cc ar ranlib; do
    target_flag=""
    [ "$tool" = cc ] && target_flag="-target $zig_target"
    printf '#!/bin/sh\nexec "%s" -m ziglang %s %s "$@"\n' "$zig_python" "$tool" "$target_flag" >"$bin/$tool"
    chmod +x "$bin/$tool"
done
tar -xjf "$tarball" -C "$work/$arch/src"
src="$work/$arch/src/hwloc-$version"
jobs=$(nproc 2>/dev/null || echo 2)
host_flags=()
[ "$arch" = "$(uname -m)" ] || host_flags=(--host="$arch-linux-gnu")
(
    cd "$src"
    # PKG_CONFIG_LIBDIR: pkg-config finds none of the optional libraries above.
    PKG_CONFIG_LIBDIR=/nonexistent CC="$bin/cc" AR="$bin/ar" RANLIB="$bin/ranlib" CFLAGS="-O2" \
        ./configure -q --prefix="$prefix" "${host_flags[@]}" "${configure_flags[@]}"
    make -s -j"$jobs" -C hwloc
    # The library, its headers and hwloc.pc; the command-line tools and tests are not needed.
    make -s -C hwloc install
    make -s -C include install
    make -s install-hwlocpkgconfigDATA
) >"$work/$arch/build.log" 2>&1 || {
    log "error: building hwloc failed; the last lines of $work/$arch/build.log:"
    tail -n 30 "$work/$arch/build.log" >&2
    exit 1
}
if grep -q -e '-ludev\|-lxml2\|-lpciaccess' "$prefix/lib/pkgconfig/hwloc.pc"; then
    log "error: the static hwloc still wants an extra shared library:"
    grep Libs "$prefix/lib/pkgconfig/hwloc.pc" >&2
    exit 1
fi
echo "$signature" >"$stamp"
echo "$prefix"
