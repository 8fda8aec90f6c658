"""NUMA-aware placement: the plan on the fake two-node topology, the explain CLI, and on the
real host, where the I/O threads actually run and where the arena's pages are."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest
from conftest import RedisServer

from lmcache_resp import InvalidInputError, PagedRespStore, RespConnector
from lmcache_resp.topology import main as topology_main

FIXTURE = Path(__file__).resolve().parents[1] / "numa" / "tests" / "fixtures" / "two-numa-nic.xml"


def explain(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert topology_main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_the_nic_on_package_1_resolves_to_cpus_4_to_7_and_node_1(capsys: pytest.CaptureFixture[str]) -> None:
    plan = explain(capsys, "--topology-xml", str(FIXTURE), "--interface", "eth1", "--num-workers", "4", "--host", "10.0.0.9")
    assert plan["worker_cpus"] == [4, 6, 5, 7], "one per core first, then siblings"
    assert plan["cpuset"] == [4, 5, 6, 7]
    assert plan["memory_node"] == 1
    assert any("eth1 is on NUMA node 1" in line for line in plan["explanation"])  # type: ignore[attr-defined]
    rdma = explain(capsys, "--topology-xml", str(FIXTURE), "--interface", "mlx5_0", "--num-workers", "2")
    assert rdma["memory_node"] == 1


def test_explicit_choices_on_the_fixture(capsys: pytest.CaptureFixture[str]) -> None:
    node0 = explain(capsys, "--topology-xml", str(FIXTURE), "--cpu-affinity", "numa:0", "--num-workers", "4")
    assert sorted(node0["worker_cpus"]) == [0, 1, 2, 3] and node0["memory_node"] == 0  # type: ignore[type-var]
    listed = explain(capsys, "--topology-xml", str(FIXTURE), "--cpu-affinity", "4-5,7", "--num-workers", "3")
    assert sorted(listed["worker_cpus"]) == [4, 5, 7]  # type: ignore[type-var]
    none = explain(capsys, "--topology-xml", str(FIXTURE), "--cpu-affinity", "none")
    assert none["worker_cpus"] == [None] * 8 and none["memory_node"] is None


@pytest.mark.parametrize(
    ("affinity", "message"),
    [
        ("0-99", "do not exist"),
        ("3-1", "range 3-1 is reversed"),
        ("numa:7", "NUMA node 7 does not exist; existing nodes are 0-1"),
        ("cores", "is not a CPU number"),
        ("", "the value is empty"),
    ],
)
def test_bad_cpu_affinity_is_a_clear_error(capsys: pytest.CaptureFixture[str], affinity: str, message: str) -> None:
    assert topology_main(["--topology-xml", str(FIXTURE), "--cpu-affinity", affinity]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cpu_affinity") and message in err


def test_loopback_has_no_device_and_auto_says_it_falls_back(capsys: pytest.CaptureFixture[str]) -> None:
    plan = explain(capsys, "--host", "127.0.0.1", "--port", "6390")
    assert plan["worker_cpus"] == [None] * 8 and plan["memory_node"] is None
    text = " ".join(plan["explanation"])  # type: ignore[arg-type]
    assert "loopback" in text and "falling back to no pinning" in text
    unix = explain(capsys, "--url", "unix:///run/redis.sock")
    assert "unix socket" in " ".join(unix["explanation"])  # type: ignore[arg-type]


def test_human_readable_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert topology_main(["--topology-xml", str(FIXTURE), "--interface", "eth1", "--num-workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "memory node:  1" in out and "CPU 4, CPU 6" in out and "why:" in out


def test_worker_threads_run_on_the_planned_cpus_on_this_host(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lmcache_resp")
    allowed = sorted(os.sched_getaffinity(0))
    with PagedRespStore(
        f"redis://127.0.0.1:{redis_server.port}", page_size=1 << 20, num_pages=4, num_workers=3,
        cpu_affinity=str(allowed[0]),
    ) as store:
        assert store.placement["worker_cpus"] == [allowed[0]] * 3
        assert store.placement["memory_node"] == 0
        for tid, cpu in store.worker_threads:
            assert os.sched_getaffinity(tid) == {cpu}, f"I/O thread {tid}"
        pages = store.allocate_many(4)
        assert all(p.memory_node in (0, None) for p in pages), "pages report the bound node where the kernel can say"
        store.put(["a", "b", "c", "d"], pages)
    assert "placement:" in caplog.text and "pinned to CPUs" in caplog.text
    with RespConnector(host="127.0.0.1", port=redis_server.port, num_workers=2, cpu_affinity="none") as connector:
        assert connector.placement["worker_cpus"] == [None, None]
    with pytest.raises(InvalidInputError, match="do not exist"):
        PagedRespStore(f"redis://127.0.0.1:{redis_server.port}", page_size=4096, num_pages=1, cpu_affinity="0-4095")
