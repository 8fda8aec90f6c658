"""Registered regions (``_native.Connector.register_region`` / ``run_ranges`` /
``submit_ranges``): caller memory registered once, batches naming ``(offset, length)`` ranges of
it, as SGLang's host pool is moved (docs/sglang.md). Against a real server."""

from __future__ import annotations

import gc
import select
import weakref

import numpy as np
import pytest
from conftest import RedisServer

from lmcache_resp import InvalidInputError, RespSettings, _native
from lmcache_resp_testing.servers import pause, redis_py, resume


def connector(server: RedisServer) -> _native.Connector:
    return _native.Connector(RespSettings.resolve(host="127.0.0.1", port=server.port, num_workers=2, timeout=5))


def spans(*pairs: tuple[int, int]) -> np.ndarray:
    return np.array(pairs, dtype=np.uint64)


def test_ranges_go_out_and_come_back_into_other_ranges(redis_server: RedisServer) -> None:
    c = connector(redis_server)
    pool = np.random.default_rng(1).integers(0, 256, 1 << 20, dtype=np.uint8)
    region = c.register_region(pool)
    out = spans((0, 4096), (8192, 4096), (65536, 1000), (100_000, 1000))
    assert c.run_ranges("set", region, ["a", "b"], out, [":k", ":v"], "ns:").hits == [True] * 4
    assert redis_py(redis_server).get("ns:b:v") == pool[100_000:101_000].tobytes()
    back = spans((500_000, 4096), (600_000, 4096), (700_000, 1000), (800_000, 1000))
    assert c.run_ranges("get", region, ["a", "b"], back, [":k", ":v"], "ns:").hits == [True] * 4
    for (o, n), (p, _) in zip(out.tolist(), back.tolist()):
        assert pool[p : p + n].tobytes() == pool[o : o + n].tobytes()
    assert c.run_ranges("exists", region, ["a", "b", "c"], None, [":k", ":v"], "ns:").hits == [True] * 4 + [False] * 2
    # A value of another length than its range is a miss; the range is untouched.
    before = pool[:4096].copy()
    assert c.run_ranges("get", region, ["ns:a:v"], spans((0, 4097))).hits == [False]
    assert np.array_equal(pool[:4096], before)
    c.unregister_region(region)
    c.close()


def test_a_region_in_use_cannot_be_unregistered(redis_server: RedisServer) -> None:
    c = connector(redis_server)
    pool = np.zeros(1 << 16, dtype=np.uint8)
    region = c.register_region(pool)
    pause(redis_server)
    try:
        c.submit_ranges("get", region, ["k"], spans((0, 1024)))
        with pytest.raises(InvalidInputError, match=f"region {region} is in use by 1 batch"):
            c.unregister_region(region)
    finally:
        resume(redis_server)
    results = []
    while not results:
        select.select([c.event_fd()], [], [], 5)
        results = c.drain()
    assert results[0].hits == [False]
    c.unregister_region(region)
    with pytest.raises(InvalidInputError, match="not registered"):
        c.run_ranges("get", region, ["k"], spans((0, 1024)))
    c.close()


def test_bad_ranges_and_buffers_are_refused_before_anything_is_sent(redis_server: RedisServer) -> None:
    c = connector(redis_server)
    region = c.register_region(np.zeros(4096, dtype=np.uint8))
    with pytest.raises(InvalidInputError, match=r"key 1: range 4000\+97 is not inside region"):
        c.run_ranges("set", region, ["a", "b"], spans((0, 8), (4000, 97)))
    with pytest.raises(InvalidInputError, match="uint64"):
        c.run_ranges("set", region, ["a"], np.array([[0, 8]], dtype=np.int64))
    with pytest.raises(InvalidInputError, match="pairs"):
        c.run_ranges("set", region, ["a"], np.array([0, 8, 16], dtype=np.uint64))
    with pytest.raises(InvalidInputError, match="1 pages of 2 segment"):
        c.run_ranges("set", region, ["a"], spans((0, 8)), [":k", ":v"])
    with pytest.raises(InvalidInputError, match="read-only"):
        c.register_region(b"immutable bytes")
    assert redis_py(redis_server).dbsize() == 0, "nothing was sent"
    c.close()


def test_a_registration_holds_its_buffer_until_unregistered(redis_server: RedisServer) -> None:
    """What docs/sglang.md promises: a registered region holds a reference to the buffer's
    exporter, so dropping every other reference never frees memory a worker may still use; and
    numpy's checked resize is refused while it is registered (only resize(refcheck=False), which
    numpy documents as unsafe, can free it under us)."""
    c = connector(redis_server)
    pool = np.random.default_rng(2).integers(0, 256, 1 << 16, dtype=np.uint8)
    expected = pool[:4096].tobytes()
    holder = weakref.ref(pool)
    region = c.register_region(pool)
    with pytest.raises(ValueError, match="resize"):
        pool.resize(1 << 20)
    del pool
    gc.collect()
    assert holder() is not None, "the registration keeps the array alive"
    assert c.run_ranges("set", region, ["held"], spans((0, 4096))).hits == [True]
    assert redis_py(redis_server).get("held") == expected
    c.unregister_region(region)
    gc.collect()
    assert holder() is None, "unregistering lets go of it"
    c.close()
