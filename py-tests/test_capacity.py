"""Client-side capacity tracking and LRU eviction against a real redis-server."""

from __future__ import annotations

import select
import time

import numpy as np
from conftest import RedisServer, pattern

from lmcache_resp import RespSettings, PagedRespStore, RespConnector
from lmcache_resp_testing.servers import redis_py

EVICTION = {"eviction_policy": "LRU", "trigger_watermark": 0.8, "eviction_ratio": 0.2}


def wait_until(predicate, what: str, timeout: float = 10) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def complete(connector: RespConnector, future_id: int) -> tuple[int, bool, str, list[bool] | None]:
    while True:
        select.select([connector.event_fd()], [], [], 5)
        for completion in connector.drain_completions():
            if completion[0] == future_id:
                return completion


def test_past_the_watermark_the_least_recently_used_keys_leave_the_server(
    redis_server: RedisServer, clean_env
) -> None:
    # 1 MiB capacity (max_capacity_gb counts GiB, as LMCache does), 100 kB values. Capacity
    # settings go through RespSettings: RespConnector(**adapter_params) is MP mode's entry,
    # where LMCache owns eviction.
    connector = RespConnector.from_settings(RespSettings.resolve(
        host="127.0.0.1", port=redis_server.port, num_workers=2, max_capacity_gb=2**-10, eviction=EVICTION
    ))
    other = redis_py(redis_server)
    values = [np.frombuffer(pattern(100_000, i), dtype=np.uint8).copy() for i in range(9)]
    keys = [f"cap:{i}" for i in range(9)]
    assert complete(connector, connector.submit_batch_set(keys[:8], [memoryview(v) for v in values[:8]]))[1]
    stats = connector.capacity_stats
    assert stats is not None and (stats["stored_bytes"], stats["keys"], stats["evictions"]) == (800_000, 8, 0)
    # Uses: a GET hit on key 0, an EXISTS on key 1. Keys 2 and 3 are now the least recent.
    out = np.zeros(100_000, dtype=np.uint8)
    assert complete(connector, connector.submit_batch_get(keys[:1], [memoryview(out)]))[3] == [True]
    assert complete(connector, connector.submit_batch_exists(keys[1:2]))[3] == [True]
    # Key 8 takes usage to 900 kB, past 80% of 1 MiB: ceil(9 * 0.2) = 2 keys are deleted.
    assert complete(connector, connector.submit_batch_set(keys[8:], [memoryview(values[8])]))[1]
    wait_until(lambda: other.dbsize() == 7, "the eviction DELs")
    assert [other.exists(k) for k in keys] == [1, 1, 0, 0, 1, 1, 1, 1, 1]
    stats = connector.capacity_stats
    assert stats is not None
    assert (stats["stored_bytes"], stats["keys"], stats["evictions"], stats["evicted_bytes"]) == (700_000, 7, 2, 200_000)
    assert stats["policy"] == "LRU"
    connector.close()


def test_usage_stays_within_capacity_under_a_put_heavy_run(redis_server: RedisServer, clean_env) -> None:
    capacity = 2 << 20
    with PagedRespStore(
        f"redis://127.0.0.1:{redis_server.port}", page_size=100_000, num_pages=3, num_workers=2,
        max_capacity_gb=capacity / 2**30, eviction=EVICTION,
    ) as store:
        pages = store.allocate_many(3)
        for i, page in enumerate(pages):
            page.write_bytes(pattern(100_000, i))
        for batch in range(60):
            store.put([f"heavy:{batch}:{i}" for i in range(3)], pages)
            stats = store.capacity_stats
            assert stats is not None
            assert stats["stored_bytes"] + stats["reserved_bytes"] <= capacity, (batch, stats)
        stats = store.capacity_stats
        assert stats is not None and stats["evictions"] > 0
        other = redis_py(redis_server)
        wait_until(lambda: other.dbsize() == stats["keys"], "the server to hold exactly the tracked keys")
        assert sum(other.strlen(k) for k in other.keys("heavy:*")) <= capacity


def test_noop_tracks_without_deleting(redis_server: RedisServer, clean_env) -> None:
    with PagedRespStore(
        f"redis://127.0.0.1:{redis_server.port}", page_size=100_000, num_pages=2, num_workers=1,
        max_capacity_gb=0.0001, eviction={"eviction_policy": "noop"},
    ) as store:
        pages = store.allocate_many(2)
        for batch in range(5):
            store.put([f"noop:{batch}:0", f"noop:{batch}:1"], pages)
        stats = store.capacity_stats
        assert stats is not None and stats["stored_bytes"] == 1_000_000 and stats["evictions"] == 0
        assert redis_py(redis_server).dbsize() == 10
        assert store.delete(["noop:0:0"]) == [True]
        stats = store.capacity_stats
        assert stats is not None and (stats["keys"], stats["stored_bytes"]) == (9, 900_000)


def test_tracking_is_off_by_default(redis_server: RedisServer, clean_env) -> None:
    with PagedRespStore(f"redis://127.0.0.1:{redis_server.port}", page_size=4096, num_pages=1, num_workers=1) as store:
        assert store.capacity_stats is None
