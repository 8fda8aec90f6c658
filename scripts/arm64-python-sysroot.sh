#!/usr/bin/env bash
# Lays out an arm64 (aarch64) CPython 3.11 from Debian 12's arm64 packages in a sysroot and
# prints its path, so that scripts/check-wheel.sh can run the aarch64 wheel on this x86_64
# machine under qemu-user-static:
#
#   qemu-aarch64-static -L "$sysroot" "$sysroot/usr/bin/python3.11" ...
#
# The .debs are fetched with `apt-get download` through a private apt state under target/ (its
# own sources list for arm64, lists, cache and an empty dpkg status), so the machine's apt
# configuration and dpkg architectures are not touched, and unpacked with `dpkg -x`: nothing is
# installed, no maintainer script runs. Safe to run again: a finished sysroot is reused.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/debian-apt.sh
. scripts/lib/debian-apt.sh

work="$PWD/target/arm64-python"
sysroot="$work/sysroot"
# The interpreter, its standard library and the shared libraries these load (libpython3.11-stdlib's
# dependencies, less what only the nis module needs); libgcc-s1 for Rust's unwinder.
packages=(
    python3.11-minimal libpython3.11-minimal libpython3.11-stdlib
    libc6 libgcc-s1 zlib1g libexpat1 libffi8 libssl3 libbz2-1.0 liblzma5 libuuid1
    libcrypt1 libtinfo6 libncursesw6 libreadline8 libsqlite3-0 libdb5.3
)
stamp="$sysroot/.packages"
log() { echo "$@" >&2; }

if [ -x "$sysroot/usr/bin/python3.11" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${packages[*]}" ]; then
    echo "$sysroot"
    exit 0
fi

debian_main_mirror " to take arm64 packages from" || exit 1
log "==> fetching arm64 CPython 3.11 from $mirror $codename (private apt state in $work/apt)"
apt="$work/apt"
rm -rf "$apt" "$sysroot"
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/debs" "$sysroot"
: >"$apt/status"
echo "deb [arch=arm64${keyring:+ signed-by=$keyring}] $mirror $codename main" >"$apt/sources.list"
private_apt_options "$apt"
apt_opts=("${private_apt_opts[@]}" -o APT::Architecture=arm64 -o APT::Architectures::=arm64 -o "Dir::State::status=$apt/status")
apt-get "${apt_opts[@]}" update >&2
(cd "$apt/debs" && apt-get "${apt_opts[@]}" download "${packages[@]/%/:arm64}" >&2)
for deb in "$apt/debs"/*.deb; do
    dpkg -x "$deb" "$sysroot"
done
# Debian's merged /usr: the loader is looked up as /lib/ld-linux-aarch64.so.1.
for dir in lib bin sbin; do
    [ -e "$sysroot/$dir" ] || ln -s "usr/$dir" "$sysroot/$dir"
done
[ -x "$sysroot/usr/bin/python3.11" ] || { log "error: no usr/bin/python3.11 in the unpacked packages"; exit 1; }
rm -rf "$apt"
echo "${packages[*]}" >"$stamp"
echo "$sysroot"
