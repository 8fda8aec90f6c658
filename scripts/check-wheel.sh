#!/usr/bin/env bash
# Checks the release wheels the way a user gets them: builds them with scripts/release.sh, checks
# every wheel's tags and native module, and runs them, installed with no package index (they
# have no dependencies), from outside the repository, so the source tree is not on sys.path.
#
#   scripts/check-wheel.sh [x86_64|aarch64|all]     # default: x86_64 (what CI runs)
#
# For every wheel (cp311-abi3 and cp310, per architecture) it fails unless:
#   - it holds what users run and no test fixture: its files are listed, its top level is
#     lmcache_resp, lmcache_resp_servers (the benchmark's throwaway servers) and the dist-info,
#     and none is of the test-support package (testing/lmcache_resp_testing) or a test folder, a
#     conftest.py or test module, a certificate, key or passphrase file, or a module importing the
#     test-support package;
#   - the file name and the WHEEL metadata carry the expected tags (cp311-abi3 or cp310-cp310,
#     manylinux_2_28_<arch>), and pip accepts the wheel for that platform and Python;
#   - the module is an ELF shared object for that architecture whose NEEDED entries are all
#     inside the manylinux policy (no libhwloc, no libudev), with no RPATH/RUNPATH, that needs no
#     glibc symbol version newer than GLIBC_2.28 (readelf -V) and exports only PyInit__native.
# x86_64: the release module's surface is exactly what its _native.pyi declares (no test hook:
# lmcache_resp_testing.stub_surface --release, and mypy.stubtest with no allowance, both from
# .venv against the unpacked abi3 wheel). The abi3 wheel is installed into a fresh venv of this
# machine's python3 and run as below, and so is each wheel under every other CPython 3.10-3.13
# found here (PATH, pyenv):
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
# In the python3 venv, `python -m lmcache_resp.bench` then runs tiny verified runs on the
# throwaway servers its options start (one plain, one --tls, a --cluster 3), from the wheel alone
# (numpy, the benchmark's one dependency, linked in from .venv: there is no package index).
# aarch64: the abi3 wheel runs the same checks under qemu-user-static (installed with apt-get
# when missing) in Debian 12's arm64 CPython 3.11, unpacked into a sysroot by
# scripts/arm64-python-sysroot.sh, against the same (x86_64) redis-server. Debian 12 has no
# arm64 Python 3.10, so the aarch64 cp310 wheel gets the static checks above only.
# The environment is emptied (env -i): no LD_LIBRARY_PATH, no PYTHONPATH but the aarch64 one.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

which=${1:-x86_64}
case "$which" in
    x86_64 | aarch64) arches=("$which") ;;
    all) arches=(x86_64 aarch64) ;;
    *) echo "usage: $0 [x86_64|aarch64|all]" >&2; exit 2 ;;
esac

start=$SECONDS
scripts/release.sh "$which"
echo "==> release.sh $which took $((SECONDS - start)) s"

tmp=$(mktemp -d)
redis_pid=""
cleanup() {
    if [ -n "$redis_pid" ]; then kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; fi
    rm -rf "$tmp"
}
trap cleanup EXIT

# check_wheel ARCH PYTAG ABITAG: the static checks of dist/'s one wheel with these tags.
check_wheel() {
    local arch=$1 pytag=$2 abitag=$3
    local platform="manylinux_2_28_$arch" wheels wheel dir sos so needed lib allowed machine newest exported
    mapfile -t wheels < <(ls dist/lmcache_resp-*-"$pytag-$abitag-$platform".whl 2>/dev/null)
    [ ${#wheels[@]} -eq 1 ] || { echo "error: expected one $pytag-$abitag-$platform wheel in dist/, found ${wheels[*]:-none}" >&2; exit 1; }
    wheel="$repo/${wheels[0]}"
    echo "==> $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"
    check_contents "$wheel"
    dir="$tmp/unpacked-$pytag-$arch"
    mkdir -p "$dir"
    (cd "$dir" && python3 -m zipfile -e "$wheel" .)
    local tags
    tags=$(sed -n 's/^Tag: //p' "$dir"/lmcache_resp-*.dist-info/WHEEL)
    [ "$tags" = "$pytag-$abitag-$platform" ] || { echo "error: WHEEL says Tag: $tags, the file name $pytag-$abitag-$platform" >&2; exit 1; }
    echo "    WHEEL tag: $tags"
    # pip's own tag matching: the wheel installs for this platform and Python (nothing runs).
    python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-index --no-deps --only-binary=:all: \
        --target "$tmp/pip-$pytag-$arch" --platform "$platform" --implementation cp \
        --python-version "${pytag#cp}" --abi "$abitag" "$wheel"
    echo "    pip accepts it for --platform $platform --python-version ${pytag#cp} --abi $abitag"
    mapfile -t sos < <(find "$dir" -name '_native*.so')
    [ ${#sos[@]} -eq 1 ] || { echo "error: expected one _native module in $(basename "$wheel"), found ${sos[*]:-none}" >&2; exit 1; }
    so=${sos[0]}
    case "$arch" in
        x86_64) machine="Advanced Micro Devices X86-64"; allowed=" libc.so.6 libm.so.6 libgcc_s.so.1 ld-linux-x86-64.so.2 libpthread.so.0 libdl.so.2 librt.so.1 " ;;
        aarch64) machine="AArch64"; allowed=" libc.so.6 libm.so.6 libgcc_s.so.1 ld-linux-aarch64.so.1 libpthread.so.0 libdl.so.2 librt.so.1 " ;;
    esac
    readelf -h "$so" | grep -q "Machine: *$machine\$" || { echo "error: $so is not $machine:" >&2; readelf -h "$so" | grep Machine >&2; exit 1; }
    echo "    $(basename "$so"): ELF $machine, $(du -k "$so" | cut -f1) KiB"
    needed=$(readelf -d "$so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
    echo "    NEEDED: $(echo $needed)"
    # The manylinux policy's libraries that a Rust extension may use (glibc 2.28 still has
    # libpthread and libdl apart from libc).
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
    # Every glibc symbol version the module needs (readelf reads any architecture's ELF).
    newest=$(readelf -V -W "$so" | sed -n 's/.*Name: GLIBC_\([0-9.]*\).*/\1/p' | sort -uV | tail -n 1)
    [ -n "$newest" ] || { echo "error: no GLIBC_ version needs found in $so" >&2; exit 1; }
    if [ "$(printf '%s\n2.28\n' "$newest" | sort -V | tail -n 1)" != 2.28 ]; then
        echo "error: the module needs GLIBC_$newest, newer than manylinux_2_28 allows:" >&2
        readelf --dyn-syms -W "$so" | grep -E "@GLIBC_$newest" >&2
        exit 1
    fi
    echo "    newest glibc symbol version needed: GLIBC_$newest"
    exported=$(readelf --dyn-syms -W "$so" | awk '$5 == "GLOBAL" && $7 != "UND" { print $8 }' | sed 's/@.*//' | sort -u)
    [ "$exported" = PyInit__native ] || { echo "error: the module exports more than PyInit__native: $(echo $exported)" >&2; exit 1; }
    echo "    exports: $exported"
}

# check_contents WHEEL: lists the wheel's files; fails on any test fixture among them.
check_contents() {
    python3 - "$1" <<'PY'
import ast
import sys
import zipfile
from pathlib import PurePosixPath

TEST_FOLDERS = {"lmcache_resp_testing", "testing", "tests", "test", "py-tests", "lmcache-tests", "native-tests",
                "fixtures"}
SECRETS = {".crt", ".key", ".pem", ".csr", ".pass", ".p12", ".pfx", ".srl"}

with zipfile.ZipFile(sys.argv[1]) as wheel:
    names = sorted(wheel.namelist())
    print(f"    {len(names)} files:")
    problems = []
    for name in names:
        print(f"      {name}")
        path = PurePosixPath(name)
        if TEST_FOLDERS & set(path.parts[:-1]):
            problems.append(f"{name}: in a test folder")
        elif path.name == "conftest.py" or (path.suffix == ".py" and (path.name.startswith("test_")
                                                                       or path.stem.endswith("_test"))):
            problems.append(f"{name}: a test module")
        elif path.suffix in SECRETS:
            problems.append(f"{name}: a certificate, key or passphrase")
        elif path.suffix in (".py", ".pyi"):
            for node in ast.walk(ast.parse(wheel.read(name), filename=name)):
                modules = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                           else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                if any(module.split(".")[0] == "lmcache_resp_testing" for module in modules):
                    problems.append(f"{name}: imports the test-support package (line {node.lineno})")
top = {PurePosixPath(name).parts[0] for name in names if not PurePosixPath(name).parts[0].endswith(".dist-info")}
if top != {"lmcache_resp", "lmcache_resp_servers"}:
    problems.append(f"its top level is {sorted(top)}, not lmcache_resp and lmcache_resp_servers")
if problems:
    print("error: the wheel holds test fixtures or misses a package:\n  " + "\n  ".join(problems), file=sys.stderr)
    sys.exit(1)
print("    lmcache_resp and lmcache_resp_servers, no test fixture among them")
PY
}

for arch in "${arches[@]}"; do
    check_wheel "$arch" cp310 cp310
    check_wheel "$arch" cp311 abi3
done

if [[ " ${arches[*]} " == *" x86_64 "* ]]; then
    # The development venv's mypy and the test-support package, on the release module: the wheel
    # unpacked first on the path (checked: it is what gets imported), run from outside the
    # repository.
    [ -x .venv/bin/python ] || { echo "error: no .venv (scripts/setup.sh makes it): its mypy checks the stub" >&2; exit 1; }
    unpacked="$tmp/unpacked-cp311-x86_64"
    echo "==> the release module against its _native.pyi: every name (private ones too), and stubtest"
    (cd "$tmp" && PYTHONPATH="$unpacked:$repo/testing" "$repo/.venv/bin/python" -c '
import sys
import lmcache_resp._native as native
assert native.__file__.startswith(sys.argv[1]), native.__file__
from lmcache_resp_testing.stub_surface import main
sys.exit(main(["--release"]))' "$unpacked")
    (cd "$tmp" && PYTHONPATH="$unpacked" "$repo/.venv/bin/python" -m mypy.stubtest lmcache_resp._native)
fi

echo "==> starting a throwaway redis-server on a unix socket"
command -v redis-server >/dev/null || { echo "error: redis-server is missing (scripts/setup.sh installs it)" >&2; exit 1; }
# Port 0: no TCP listener, the unix socket $tmp/redis.sock only; no persistence.
env -i PATH=/usr/bin:/bin redis-server --port 0 --unixsocket "$tmp/redis.sock" --unixsocketperm 700 \
    --save "" --appendonly no --dir "$tmp" --logfile "$tmp/redis.log" --daemonize no \
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
can_hide=false
[ ${#hidden[@]} -gt 0 ] && unshare --mount --propagation private true 2>/dev/null && can_hide=true

# run_x86_64 PYTHON PYTAG ABITAG: installs that wheel into a fresh venv of PYTHON and runs check.py.
run_x86_64() {
    local python=$1 pytag=$2 abitag=$3 venv wheel
    wheel=$(ls "$repo"/dist/lmcache_resp-*-"$pytag-$abitag"-manylinux_2_28_x86_64.whl)
    venv="$tmp/venv-$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    echo "==> x86_64: $(basename "$wheel") in a fresh venv of $("$python" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install -q --no-index --disable-pip-version-check "$wheel"
    local run=(env -i PATH=/usr/bin:/bin HOME="$tmp" LANG=C.UTF-8 "$venv/bin/python" -I "$tmp/check.py" "$repo" "$tmp")
    if $can_hide; then
        echo "    with ${hidden[*]} hidden (bind-mounted /dev/null, private mount namespace)"
        # shellcheck disable=SC2016
        (cd "$tmp" && unshare --mount --propagation private bash -c \
            'n=$1; shift; for f in "${@:1:n}"; do mount --bind /dev/null "$f"; done; shift "$n"; exec "$@"' \
            hide "${#hidden[@]}" "${hidden[@]}" "${run[@]}" "${hidden[@]}")
    else
        if [ ${#hidden[@]} -eq 0 ]; then
            echo "    (no libhwloc or libudev on this machine)"
        else
            echo "    (no mount namespace here, so ${hidden[*]} stay visible; NEEDED and /proc/self/maps are checked)"
        fi
        (cd "$tmp" && "${run[@]}")
    fi
}

# run_bench VENV: `python -m lmcache_resp.bench`, tiny verified runs on the throwaway servers its
# options start (plain, TLS, a cluster), from the wheel installed in VENV, outside the repository.
run_bench() {
    local venv=$1 numpy options
    numpy=$("$repo/.venv/bin/python" -c 'import numpy, os; print(os.path.dirname(os.path.dirname(numpy.__file__)))')
    mkdir -p "$tmp/numpy-only"
    for entry in "$numpy"/numpy "$numpy"/numpy.libs; do
        if [ -e "$entry" ]; then ln -sfn "$entry" "$tmp/numpy-only/"; fi
    done
    "$venv/bin/python" -I -c 'import lmcache_resp.bench as b, sys; assert "site-packages" in b.__file__, b.__file__'
    for options in "" "--tls" "--cluster 3"; do
        echo "==> x86_64: python -m lmcache_resp.bench ${options:-(a plain server)} from the wheel"
        # shellcheck disable=SC2086
        (cd "$tmp" && env -i PATH=/usr/bin:/bin HOME="$tmp" LANG=C.UTF-8 PYTHONPATH="$tmp/numpy-only" \
            "$venv/bin/python" -m lmcache_resp.bench --chunk-mb 0.0625 --num-keys 8 --rounds 1 $options \
            >"$tmp/bench.out" 2>&1) || { cat "$tmp/bench.out" >&2; echo "error: the benchmark failed" >&2; exit 1; }
        grep -E "started|stopped" "$tmp/bench.out" | sed 's/^/    /'
    done
}

# Other CPythons 3.10-3.13 on this machine, besides python3: on PATH, or pyenv's.
find_python() {
    local version=$1 candidate
    for candidate in "$(command -v "python$version" 2>/dev/null)" "$(pyenv root 2>/dev/null)"/versions/"$version".*/bin/"python$version"; do
        [ -x "$candidate" ] && "$candidate" -c 'import venv' 2>/dev/null && { echo "$candidate"; return 0; }
    done
    return 1
}

for arch in "${arches[@]}"; do
    case "$arch" in
    x86_64)
        run_x86_64 python3 cp311 abi3
        run_bench "$tmp/venv-$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
        default_version=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
        for version in 3.10 3.11 3.12 3.13; do
            [ "$version" = "$default_version" ] && continue
            if python=$(find_python "$version"); then
                if [ "$version" = 3.10 ]; then run_x86_64 "$python" cp310 cp310; else run_x86_64 "$python" cp311 abi3; fi
            else
                echo "==> x86_64: no CPython $version here: not run under it"
            fi
        done
        ;;
    aarch64)
        if ! command -v qemu-aarch64-static >/dev/null; then
            echo "==> installing qemu-user-static (apt-get)"
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q qemu-user-static >/dev/null
        fi
        sysroot=$(scripts/arm64-python-sysroot.sh)
        site="$tmp/arm64/lib/python3.11/site-packages"
        wheel=$(ls "$repo"/dist/lmcache_resp-*-cp311-abi3-manylinux_2_28_aarch64.whl)
        echo "==> aarch64: $(basename "$wheel") under qemu-aarch64-static, Debian's arm64 CPython 3.11 in $sysroot"
        # The host's pip unpacks the wheel for the arm64 interpreter (a wheel installs by copying).
        python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-index --no-deps --only-binary=:all: \
            --target "$site" --platform manylinux_2_28_aarch64 --implementation cp --python-version 3.11 --abi abi3 "$wheel"
        start=$SECONDS
        (cd "$tmp" && env -i PATH=/usr/bin:/bin HOME="$tmp" LANG=C.UTF-8 PYTHONPATH="$site" \
            qemu-aarch64-static -L "$sysroot" "$sysroot/usr/bin/python3.11" -s "$tmp/check.py" "$repo" "$tmp")
        echo "    (the aarch64 run took $((SECONDS - start)) s under emulation)"
        ;;
    esac
done
echo "==> wheel check passed: $(cd dist && ls lmcache_resp-*.whl | grep -E "_($(IFS='|'; echo "${arches[*]}"))\.whl$" | tr '\n' ' ')"
