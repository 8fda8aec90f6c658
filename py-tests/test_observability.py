"""Logs and metrics (docs/observability.md): the core's records reach Python's logging, the
settings line masks the password, failed batches are summarised at WARNING at most once a
second, a flood of records never blocks the core and its drops are counted; every front's
stats() counts exactly what it did, and the same figures reach Prometheus (the collector in
this process, the bridge's --metrics endpoint)."""

from __future__ import annotations

import logging
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from conftest import PAGE, BridgeProcess, RedisServer, free_port
from lmcache_resp_testing import hooks
from lmcache_resp import PagedRespStore, RedisClient, RespConnector, Stats, _logging, _native, metrics

PASSWORD = "s3cret-default-pw"


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self, logger: str | None = None, level: int | None = None) -> list[str]:
        return [r.getMessage() for r in self.records
                if (logger is None or r.name == logger) and (level is None or r.levelno == level)]


@pytest.fixture
def capture() -> Iterator[Capture]:
    handler = Capture()
    root = logging.getLogger("lmcache_resp")
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    _logging.refresh_level()
    _logging.flush()
    handler.records.clear()
    yield handler
    root.removeHandler(handler)
    root.setLevel(old)
    _logging.refresh_level()


def wait_for(capture: Capture, predicate: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, [r.getMessage() for r in capture.records]
        time.sleep(0.02)


# -- logging -----------------------------------------------------------------------------------


def test_the_settings_line_is_logged_at_info_with_the_password_masked(secure_server: RedisServer,
                                                                      capture: Capture) -> None:
    connector = RespConnector(host="127.0.0.1", port=secure_server.port, password=PASSWORD, num_workers=2)
    store = PagedRespStore(f"redis://:{PASSWORD}@127.0.0.1:{secure_server.port}", page_size=4096, num_pages=4,
                           num_workers=1)
    client = RedisClient("127.0.0.1", secure_server.port, password=PASSWORD)
    client.close()
    store.close()
    connector.close()
    _logging.flush()
    settings = [m for m in capture.messages("lmcache_resp", logging.INFO) if m.startswith("RespConnector: settings")]
    assert len(settings) == 1, capture.messages()
    assert "'password': '***'" in settings[0]
    assert any(m.startswith("PagedRespStore: settings") and "'***'" in m for m in capture.messages())
    for record in capture.records:
        assert PASSWORD not in record.getMessage(), record.getMessage()


def test_a_failed_batch_is_one_rate_limited_warning_naming_the_count_and_a_key(redis_server: RedisServer,
                                                                               capture: Capture) -> None:
    with RedisClient("127.0.0.1", redis_server.port) as client:
        client.set("too-big", np.zeros(8192, dtype=np.uint8))
    with PagedRespStore(f"resp://127.0.0.1:{redis_server.port}", page_size=4096, num_pages=4, num_workers=1) as store:
        pages = store.allocate_many(2)
        first = time.monotonic()
        for _ in range(5):
            result = store.run("get", ["too-big", "absent"], pages)
            assert result.hits == [False, False] and not result.ok
        assert time.monotonic() - first < 1.0, "the batches must fall within one interval"
        _logging.flush()
        warnings = capture.messages("lmcache_resp.batch", logging.WARNING)
        assert warnings == [
            f"1 of 2 keys failed in a GET batch to 127.0.0.1:{redis_server.port}; first: key 0 ('too-big'): "
            f"ValueTooLarge: {result.failures[0][1]}"
        ], warnings
        time.sleep(1.05)
        store.run("get", ["too-big"], pages[:1])
        _logging.flush()
        warnings = capture.messages("lmcache_resp.batch", logging.WARNING)
        assert len(warnings) == 2
        assert warnings[1].endswith("(4 more failed batches with 4 failed keys in the last 1 s not shown)"), warnings
        stats = store.stats()
        assert stats.errors["value_too_large"] == 6
        assert sum(stats.errors.values()) == 6
        assert (stats.misses, stats.hits, stats.keys["get"], stats.batches["get"]) == (5, 0, 11, 6)


def test_the_bridge_threads_records_arrive_under_lmcache_resp_bridge(redis_server: RedisServer, tmp_path: Path,
                                                                     capture: Capture) -> None:
    from lmcache_resp.settings import RespSettings

    settings = RespSettings.resolve(f"resp://127.0.0.1:{redis_server.port}", num_workers=1)
    bridge = _native.Bridge(settings, tmp_path / "b.sock", page_size=PAGE, num_pages=8)
    try:
        store = PagedRespStore.attach(tmp_path / "b.sock")
        store.close()
        wait_for(capture, lambda: len(capture.messages("lmcache_resp.bridge")) >= 2)
    finally:
        bridge.stop()
    records = [r for r in capture.records if r.name == "lmcache_resp.bridge"]
    attached = [r for r in records if " attached: up to 8 pages" in r.getMessage()]
    assert len(attached) == 1 and attached[0].levelno == logging.INFO
    assert attached[0].threadName == "lmcache-resp-bridge-control"
    assert attached[0].pathname.endswith("control.rs")
    assert any(" detached; " in r.getMessage() for r in records)


def test_a_flood_of_records_never_blocks_the_core_and_its_drops_are_reported(capture: Capture) -> None:
    count = 200_000
    seconds = hooks.log_flood(count, "lmcache_resp::flood")
    assert seconds < 5.0, f"{count} records took {seconds:.2f} s on the logging thread"
    _logging.flush()
    wait_for(capture, lambda: any("were dropped" in m for m in capture.messages("lmcache_resp.logging")))
    _logging.flush()
    emitted = len(capture.messages("lmcache_resp.flood", logging.WARNING))
    dropped = 0
    for message in capture.messages("lmcache_resp.logging", logging.WARNING):
        assert message.endswith(f"its queue ({_native.LOG_QUEUE_CAPACITY} records) was full"), message
        dropped += int(message.split()[0])
    assert dropped > 0
    assert emitted + dropped == count


def test_records_below_the_loggers_level_are_not_even_queued(capture: Capture) -> None:
    logging.getLogger("lmcache_resp").setLevel(logging.ERROR)
    _logging.refresh_level()
    hooks.log_flood(10, "lmcache_resp::quiet")
    _logging.flush()
    assert capture.messages("lmcache_resp.quiet") == []
    assert capture.messages("lmcache_resp.logging") == []


# -- stats ---------------------------------------------------------------------------------------


def check_exact(stats: Stats, endpoint: str, *, batches: dict[str, int]) -> None:
    e = stats.endpoints[endpoint]
    assert e.keys == {"get": 10, "set": 10, "exists": 0, "delete": 0}
    assert (e.bytes_sent, e.bytes_received, e.hits, e.misses) == (10 * 4096, 7 * 4096, 7, 3)
    assert sum(e.errors.values()) == 0 and e.in_flight == 0 and e.retries == 0 and e.reconnects == 0
    assert e.key_latency.count == 20
    assert stats.batches == batches
    assert stats.batch_latency.count == sum(batches.values())
    assert dict(stats)["endpoints"][endpoint]["hits"] == 7
    assert stats.to_dict()["endpoints"][endpoint]["key_latency"]["count"] == 20


def test_store_stats_count_exactly_what_a_known_batch_did(redis_server: RedisServer) -> None:
    endpoint = f"127.0.0.1:{redis_server.port}"
    with PagedRespStore(f"resp://{endpoint}", page_size=4096, num_pages=16, num_workers=2) as store:
        pages = store.allocate_many(10)
        keys = [f"k{i}" for i in range(10)]
        store.put(keys, pages)
        assert store.get(keys[:7] + ["m1", "m2", "m3"], pages) == [True] * 7 + [False] * 3
        stats = store.stats()
        check_exact(stats, endpoint, batches={"get": 1, "set": 1, "exists": 0, "delete": 0})
        assert stats.enabled and stats.endpoint == endpoint and list(stats.endpoints) == [endpoint]
        assert stats.hits == 7 and stats.keys["get"] == 10


def test_connector_and_client_stats_count_exactly(redis_server: RedisServer) -> None:
    endpoint = f"127.0.0.1:{redis_server.port}"
    buffers = [memoryview(bytearray(4096)) for _ in range(10)]
    keys = [f"c{i}" for i in range(10)]
    with RespConnector(host="127.0.0.1", port=redis_server.port, num_workers=2) as connector:
        from conftest import LMCacheLikeDriver

        driver = LMCacheLikeDriver(connector)
        driver.wait(connector.submit_batch_set(keys, buffers))
        driver.wait(connector.submit_batch_get(keys[:7] + ["x1", "x2", "x3"], buffers))
        check_exact(connector.stats(), endpoint, batches={"get": 1, "set": 1, "exists": 0, "delete": 0})
    with RedisClient("127.0.0.1", redis_server.port) as client:
        value = np.zeros(4096, dtype=np.uint8)
        for key in keys:
            client.set(key, value)
        for key in keys[:7] + ["x1", "x2", "x3"]:
            client.get(key, value)
        check_exact(client.stats(), endpoint, batches={"get": 10, "set": 10, "exists": 0, "delete": 0})


def test_errors_are_counted_by_kind_and_the_difference_of_two_snapshots_is_what_happened(
        redis_server: RedisServer) -> None:
    with RedisClient("127.0.0.1", redis_server.port) as client:
        client.set("big", np.zeros(8192, dtype=np.uint8))
        before = client.stats()
        with pytest.raises(ValueError):
            client.get("big", np.zeros(100, dtype=np.uint8))
        delta = client.stats() - before
        assert delta.errors["value_too_large"] == 1 and delta.keys["get"] == 1 and delta.keys["set"] == 0


# -- Prometheus ---------------------------------------------------------------------------------------


def samples(text: str, endpoint: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.labels.get("endpoint") == endpoint:
                labels = tuple(sorted((k, v) for k, v in s.labels.items() if k != "endpoint"))
                out[(s.name, labels)] = s.value
    return out


def check_prometheus(found: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> None:
    assert found[("lmcache_resp_keys_total", (("op", "set"),))] == 10
    assert found[("lmcache_resp_keys_total", (("op", "get"),))] == 10
    assert found[("lmcache_resp_hits_total", ())] == 7
    assert found[("lmcache_resp_misses_total", ())] == 3
    assert found[("lmcache_resp_bytes_sent_total", ())] == 10 * 4096
    assert found[("lmcache_resp_bytes_received_total", ())] == 7 * 4096
    assert found[("lmcache_resp_errors_total", (("kind", "timeout"),))] == 0
    assert found[("lmcache_resp_in_flight", ())] == 0
    assert found[("lmcache_resp_key_latency_seconds_count", ())] == 20
    assert found[("lmcache_resp_key_latency_seconds_bucket", (("le", "+Inf"),))] == 20
    assert found[("lmcache_resp_batches_total", (("op", "get"),))] == 1
    assert found[("lmcache_resp_batch_latency_seconds_count", ())] == 2


def test_the_prometheus_collector_reads_every_live_front_at_scrape_time(redis_server: RedisServer) -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    endpoint = f"127.0.0.1:{redis_server.port}"
    with PagedRespStore(f"resp://{endpoint}", page_size=4096, num_pages=16, num_workers=2) as store:
        pages = store.allocate_many(10)
        keys = [f"p{i}" for i in range(10)]
        store.put(keys, pages)
        store.get(keys[:7] + ["m1", "m2", "m3"], pages)
        text = prometheus_client.generate_latest(prometheus_client.REGISTRY).decode()
        check_prometheus(samples(text, endpoint))
        assert samples(metrics.exposition(metrics.collect()), endpoint) == samples(text, endpoint)


def test_the_bridge_serves_its_counters_on_metrics_and_to_its_clients(redis_server: RedisServer,
                                                                      tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client")
    port = free_port()
    endpoint = f"127.0.0.1:{redis_server.port}"
    process = BridgeProcess(f"redis://{endpoint}", tmp_path / "bridge.sock", "--metrics", f"127.0.0.1:{port}")
    try:
        with PagedRespStore.attach(tmp_path / "bridge.sock") as store:
            pages = store.allocate_many(10)
            keys = [f"b{i}" for i in range(10)]
            store.put(keys, pages, lengths=[4096] * 10)
            assert store.get(keys[:7] + ["m1", "m2", "m3"], pages) == [True] * 7 + [False] * 3
            stats = store.stats()
            e = stats.endpoints[endpoint]
            assert (e.keys["set"], e.keys["get"], e.hits, e.misses, e.bytes_sent) == (10, 10, 7, 3, 10 * 4096)
            # Whole pages come back on a hit (the values are 4096 bytes; the pages larger).
            assert e.bytes_received == 7 * 4096
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
                assert response.status == 200
                text = response.read().decode()
        found = samples(text, endpoint)
        check_prometheus(found)
    finally:
        process.stop()
    log = process.log.read_text()
    assert "lmcache_resp.bridge INFO bridge: client 1" in log and " attached: " in log, log
