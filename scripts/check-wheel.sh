#!/usr/bin/env bash
# Checks the release wheel the way a user gets it: builds it with scripts/release.sh, installs
# it into a fresh virtual environment with no package index (it has no dependencies), and runs
# it from outside the repository, so the source tree is not on sys.path. It fails unless:
#   - the installed module's NEEDED entries are all inside the manylinux policy (no libhwloc,
#     no libudev) and it has no RPATH/RUNPATH;
#   - it runs with the machine's hwloc and udev libraries hidden: where a mount namespace can be
#     made (root, as in CI), /dev/null is bind-mounted over every libhwloc/libudev file that
#     ldconfig knows of, so only in that namespace any attempt to load them fails, and the check
#     first proves that loading them does fail there; elsewhere it says so and runs without
#     hiding;
#   - nothing named libhwloc or libudev is mapped into the process after the calls below
#     (/proc/self/maps, which also covers a dlopen);
#   - explain_placement() plans on the two-NUMA-node XML fixture and on this host (hwloc's XML
#     import, I/O discovery and topology discovery), and a PagedRespStore pinned with
#     cpu_affinity="numa:0" round-trips pages through a throwaway redis-server on a unix socket.
# The environment is emptied (env -i): no LD_LIBRARY_PATH, no PYTHONPATH.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

scripts/release.sh
wheels=(dist/lmcache_resp-*.whl)
[ ${#wheels[@]} -eq 1 ] || { echo "error: expected one wheel in dist/, found ${wheels[*]}" >&2; exit 1; }
wheel="$repo/${wheels[0]}"
case "$wheel" in
    *-manylinux_*.whl) ;;
    *) echo "error: $wheel is not tagged manylinux" >&2; exit 1 ;;
esac

tmp=$(mktemp -d)
redis_pid=""
cleanup() {
    if [ -n "$redis_pid" ]; then kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT

echo "==> installing $(basename "$wheel") into a fresh venv"
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q --no-index --disable-pip-version-check "$wheel"
so=$(find "$tmp/venv" -name '_native*.so' -path '*site-packages/lmcache_resp/*')
[ -n "$so" ] || { echo "error: no installed _native module" >&2; exit 1; }

echo "==> NEEDED entries of the installed module"
needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "$needed" | sed 's/^/    /'
# The x86_64 manylinux policy's libraries that a Rust extension may use.
allowed=" libc.so.6 libm.so.6 libgcc_s.so.1 ld-linux-x86-64.so.2 libpthread.so.0 libdl.so.2 librt.so.1 "
for lib in $needed; do
    case "$allowed" in
        *" $lib "*) ;;
        *) echo "error: the module needs $lib, which is outside the manylinux policy" >&2; exit 1 ;;
    esac
done
if readelf -d "$so" | grep -q -E '\((RPATH|RUNPATH)\)'; then
    echo "error: the module has an RPATH/RUNPATH:" >&2
    readelf -d "$so" | grep -E '\((RPATH|RUNPATH)\)' >&2
    exit 1
fi

echo "==> starting a throwaway redis-server on a unix socket (the wheel's lmcache_resp/servers.py, by path)"
launcher=$(dirname "$so")/servers.py
[ -f "$launcher" ] || { echo "error: the wheel does not ship lmcache_resp/servers.py" >&2; exit 1; }
command -v redis-server >/dev/null || { echo "error: redis-server is missing (scripts/setup.sh installs it)" >&2; exit 1; }
# Port 0: no TCP listener, the unix socket $tmp/redis.sock only. The launcher execs the server,
# so $! is the server.
env -i PATH=/usr/bin:/bin "$tmp/venv/bin/python" -I "$launcher" server "$tmp" 0 --unix-socket \
    >/dev/null 2>"$tmp/redis.stderr" &
redis_pid=$!
for _ in $(seq 100); do
    [ -S "$tmp/redis.sock" ] && break
    sleep 0.1
done
[ -S "$tmp/redis.sock" ] || { echo "error: redis-server did not start:" >&2; cat "$tmp/redis.stderr" "$tmp/redis.log" >&2; exit 1; }

cp numa/tests/fixtures/two-numa-nic.xml "$tmp/"
cat >"$tmp/check.py" <<'EOF'
import ctypes
import os
import sys
from pathlib import Path

repo, workdir, hidden = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]

for lib in hidden:
    try:
        ctypes.CDLL(lib)
    except OSError as exc:
        print(f"    hidden: {lib} ({exc})")
    else:
        raise SystemExit(f"{lib} still loads: hiding it did not work")

import lmcache_resp
from lmcache_resp import PagedRespStore, RespSettings, _native

module = Path(_native.__file__).resolve()
assert repo not in module.parents and "site-packages" in module.parts, module
assert repo not in Path(lmcache_resp.__file__).resolve().parents, lmcache_resp.__file__
print(f"    imported {module}")

plan = _native.explain_placement(
    RespSettings(host="10.0.0.9", num_workers=4), topology_xml=str(workdir / "two-numa-nic.xml"), interface="eth1"
)
assert plan["worker_cpus"] == [4, 6, 5, 7] and plan["memory_node"] == 1, plan
print(f"    XML fixture: eth1 -> CPUs {plan['worker_cpus']}, memory node {plan['memory_node']}")

host = _native.explain_placement(RespSettings(host="127.0.0.1", cpu_affinity="numa:0", num_workers=2))
assert host["memory_node"] == 0 and host["cpuset"], host
print(f"    this host: numa:0 -> CPUs {host['cpuset']}")

size = 1 << 16
keys = ["wheel-check-0", "wheel-check-1", "wheel-check-2"]
with PagedRespStore(
    f"unix://{workdir / 'redis.sock'}", page_size=size, num_pages=4, num_workers=2, cpu_affinity="numa:0"
) as store:
    assert store.placement["memory_node"] == 0, store.placement
    pages = store.allocate_many(len(keys))
    payloads = [os.urandom(size) for _ in keys]
    for page, data in zip(pages, payloads):
        page.write_bytes(data)
    store.put(keys, pages)
    for page in pages:
        page.write_bytes(bytes(size))
    assert store.get(keys, pages) == [True] * len(keys)
    assert [bytes(page.byte_array) for page in pages] == payloads
    assert store.exists([*keys, "wheel-check-missing"]) == [True] * len(keys) + [False]
print(f"    PagedRespStore: {len(keys)} pages of {size} bytes put and got back over {workdir / 'redis.sock'}")

mapped = {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines() if "/" in line}
loaded = sorted(path for path in mapped if "libhwloc" in path or "libudev" in path)
assert not loaded, f"mapped into the process: {loaded}"
print("    no libhwloc or libudev mapped into the process")
EOF

# Every libhwloc/libudev file the dynamic loader knows of, resolved to the real file.
mapfile -t hidden < <(ldconfig -p | awk '$1 ~ /^lib(hwloc|udev)\.so/ { print $NF }' | xargs -r readlink -f | sort -u)
run=(env -i PATH=/usr/bin:/bin HOME="$tmp" LANG=C.UTF-8 "$tmp/venv/bin/python" -I "$tmp/check.py" "$repo" "$tmp")
cd "$tmp"
if [ ${#hidden[@]} -gt 0 ] && unshare --mount --propagation private true 2>/dev/null; then
    echo "==> running the wheel with ${hidden[*]} hidden (bind-mounted /dev/null, private mount namespace)"
    # shellcheck disable=SC2016
    unshare --mount --propagation private bash -c \
        'n=$1; shift; for f in "${@:1:n}"; do mount --bind /dev/null "$f"; done; shift "$n"; exec "$@"' \
        hide "${#hidden[@]}" "${hidden[@]}" "${run[@]}" "${hidden[@]}"
else
    if [ ${#hidden[@]} -eq 0 ]; then
        echo "==> running the wheel (no libhwloc or libudev on this machine)"
    else
        echo "==> running the wheel (no mount namespace here, so ${hidden[*]} stay visible; NEEDED and /proc/self/maps are checked)"
    fi
    "${run[@]}"
fi
echo "==> wheel check passed: $(basename "$wheel")"
