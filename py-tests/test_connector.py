"""RespConnector driven the way LMCache drives it: keyword construction, memoryviews of its
pinned pool, eventfd readable -> drain until empty."""

from __future__ import annotations

import select
import threading
import time

import numpy as np
import pytest
from conftest import LMCacheLikeDriver, RedisServer, free_port, lmcache_pool, pattern

from lmcache_resp import AuthenticationError, ClosedError, InvalidInputError, RespConnectionError, RespConnector
from lmcache_resp_testing.servers import redis_py


def connector_for(server: RedisServer, **kwargs: object) -> RespConnector:
    params: dict[str, object] = {"host": "127.0.0.1", "port": server.port, "num_workers": 4}
    params.update(kwargs)
    return RespConnector(**params)  # type: ignore[arg-type]


def test_round_trip_with_sizes_differing_per_key(redis_server: RedisServer) -> None:
    connector = connector_for(redis_server)
    driver = LMCacheLikeDriver(connector)
    sizes = [1, 1000, 256 * 1024, 4 << 20, 12345]
    _pool, views = lmcache_pool(sizes)
    data = [pattern(n, i) for i, n in enumerate(sizes)]
    for view, d in zip(views, data):
        view[:] = d
    keys = [f"meta-llama/Llama-3.1-8B@{i:08x}@0@{'ab' * 32}" for i in range(len(sizes))]
    fid = connector.submit_batch_set(keys, views)
    assert driver.wait(fid) == (fid, True, "", None)
    assert redis_py(redis_server).get(keys[3]) == data[3]
    _pool2, outs = lmcache_pool(sizes)
    fid = connector.submit_batch_get(keys, outs)
    assert driver.wait(fid) == (fid, True, "", [True] * 5)
    assert [bytes(v) for v in outs] == data
    fid = connector.submit_batch_exists(keys + ["nope"])
    assert driver.wait(fid) == (fid, True, "", [True] * 5 + [False])
    fid = connector.submit_batch_delete(keys[:2] + ["nope"])
    assert driver.wait(fid) == (fid, True, "", [True, True, False])
    connector.close()


def test_a_miss_is_a_false_bit_never_a_hang_or_batch_error(redis_server: RedisServer) -> None:
    connector = connector_for(redis_server)
    driver = LMCacheLikeDriver(connector)
    redis_py(redis_server).set("present", b"p" * 100)
    _pool, views = lmcache_pool([100, 100, 4096])
    fid = connector.submit_batch_get(["absent-1", "present", "absent-2"], views)
    future_id, ok, error, per_key = driver.wait(fid)
    assert (ok, error, per_key) == (True, "", [False, True, False])
    assert bytes(views[0]) == bytes(100), "a miss leaves the buffer untouched"
    connector.close()


def test_per_key_failures_are_reported_with_the_key(redis_server: RedisServer) -> None:
    connector = connector_for(redis_server)
    driver = LMCacheLikeDriver(connector)
    redis_py(redis_server).lpush("a-list", b"x")
    redis_py(redis_server).set("fits", b"y" * 4096)
    _pool, views = lmcache_pool([4096, 4096])
    fid = connector.submit_batch_get(["a-list", "fits"], views)
    _id, ok, error, per_key = driver.wait(fid)
    assert not ok and per_key == [False, True]
    assert "key 0: ServerError: WRONGTYPE" in error, error
    assert bytes(views[1]) == b"y" * 4096
    # The connection stayed in sync.
    fid = connector.submit_batch_get(["fits"], views[1:])
    assert driver.wait(fid)[1:] == (True, "", [True])
    connector.close()


def test_a_value_of_another_length_than_its_chunk_is_a_miss_as_lmcache_reports_it(redis_server: RedisServer) -> None:
    """LMCache's chunks have fixed sizes: a stored value of another length is not this chunk.
    LMCache's built-in client reports it as a miss; so does this connector, and the buffer
    stays untouched (a shorter value is never a hit over a half-filled buffer)."""
    connector = connector_for(redis_server)
    driver = LMCacheLikeDriver(connector)
    redis_py(redis_server).set("shorter", b"s" * 1000)
    redis_py(redis_server).set("longer", b"l" * 3000)
    redis_py(redis_server).set("exact", b"e" * 2000)
    pool, views = lmcache_pool([2000, 2000, 2000])
    pool[:] = 7
    fid = connector.submit_batch_get(["shorter", "longer", "exact"], views)
    assert driver.wait(fid) == (fid, True, "", [False, False, True])
    assert bytes(views[0]) == bytes(views[1]) == b"\x07" * 2000, "misses leave their buffers untouched"
    assert bytes(views[2]) == b"e" * 2000
    connector.close()


def test_lengths_are_bytes_and_writability_is_checked(redis_server: RedisServer) -> None:
    connector = connector_for(redis_server)
    driver = LMCacheLikeDriver(connector)
    floats = np.arange(256, dtype=np.float32)
    fid = connector.submit_batch_set(["floats"], [memoryview(floats)])
    assert driver.wait(fid)[1]
    assert redis_py(redis_server).strlen("floats") == 1024
    immutable = bytes(1024)
    with pytest.raises(InvalidInputError, match="buffer 0: .*read-only"):
        connector.submit_batch_get(["floats"], [immutable])
    assert immutable == bytes(1024)
    with pytest.raises(InvalidInputError, match="2 keys but 1 buffers"):
        connector.submit_batch_set(["a", "b"], [memoryview(bytearray(1))])
    connector.close()


def test_future_ids_are_unique_across_kinds_and_submits_come_from_many_threads(redis_server: RedisServer) -> None:
    connector = connector_for(redis_server)
    ids: list[int] = []
    lock = threading.Lock()
    pools = []

    def submit(t: int) -> None:
        for r in range(30):
            _pool, views = lmcache_pool([2048] * 4)
            pools.append(_pool)
            for v in views:
                v[:] = pattern(2048, t)
            keys = [f"mt:{t}:{r}:{i}" for i in range(4)]
            new = [connector.submit_batch_set(keys, views), connector.submit_batch_exists(keys),
                   connector.submit_batch_get(keys, views), connector.submit_batch_delete(keys)]
            with lock:
                ids.extend(new)

    completions: list[tuple[int, bool, str, list[bool] | None]] = []
    stop = threading.Event()

    def demux() -> None:
        fd = connector.event_fd()
        while not (stop.is_set() and len(completions) >= len(ids)):
            if select.select([fd], [], [], 0.05)[0]:
                completions.extend(connector.drain_completions())

    drain_thread = threading.Thread(target=demux)
    drain_thread.start()
    threads = [threading.Thread(target=submit, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    drain_thread.join(timeout=60)
    assert not drain_thread.is_alive()
    assert len(set(ids)) == len(ids) == 480
    assert sorted(c[0] for c in completions) == sorted(ids)
    assert all(c[1] for c in completions)
    connector.close()


def test_close_completes_everything_and_later_submits_raise(redis_server: RedisServer) -> None:
    connector = connector_for(redis_server)
    _pool, views = lmcache_pool([1 << 20] * 16)
    ids = [connector.submit_batch_set([f"close:{j}:{i}" for i in range(16)], views) for j in range(4)]
    ids.append(connector.submit_batch_exists(["x"]))
    connector.close()
    completions = connector.drain_completions()
    assert sorted(c[0] for c in completions) == ids
    for _id, ok, error, _per_key in completions:
        assert ok or "closed" in error
    with pytest.raises(ClosedError):
        connector.submit_batch_exists(["x"])
    assert connector.drain_completions() == []
    connector.close()


def test_constructor_fails_clearly(secure_server: RedisServer, clean_env) -> None:
    port = free_port()
    # An engine's adapter starts without its server unless told to require it
    # (test_fail_fast.py::test_the_setting_defaults_to_required_for_a_store_and_not_for_an_engines_adapter).
    with pytest.raises(RespConnectionError, match=f"127.0.0.1:{port}"):
        RespConnector(host="127.0.0.1", port=port, require_server_at_start=True)
    with pytest.raises(AuthenticationError) as info:
        RespConnector(host="127.0.0.1", port=secure_server.port, password="wrong-secret-9")
    assert "wrong-secret-9" not in str(info.value)
    clean_env.setenv("LMCACHE_RESP_USERNAME", "alice")
    clean_env.setenv("LMCACHE_RESP_PASSWORD", "s3cret-alice-pw")
    connector = RespConnector(host="127.0.0.1", port=secure_server.port, username="", password="")
    connector.close()


def test_reconnects_after_a_server_restart(redis_server: RedisServer) -> None:
    connector = connector_for(redis_server, timeout=5)
    driver = LMCacheLikeDriver(connector)
    _pool, views = lmcache_pool([1000])
    assert driver.wait(connector.submit_batch_set(["r"], views))[1]
    redis_server.restart()
    outcomes = [driver.wait(connector.submit_batch_exists(["r"]))]
    if not outcomes[0][1]:
        outcomes.append(driver.wait(connector.submit_batch_exists(["r"])))
    assert outcomes[-1][1:] == (True, "", [False]), "reconnected to the restarted (empty) server"
    connector.close()
