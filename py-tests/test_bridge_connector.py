"""LMCache's native connector through a bridge (``RespConnector(bridge=PATH)``): LMCache's own
buffers are staged through the bridge's pages, byte for byte, with the connector's usual
semantics (exact-length GET, misses as False bits, per-key failures), no connection settings
on the client's side, and a clear error when the bridge goes away."""

from __future__ import annotations

import asyncio
import signal
import threading

import pytest
from conftest import PAGE, PAGES, BridgeProcess, LMCacheLikeDriver, RedisServer, pattern

from lmcache_resp import InvalidInputError, PagedRespStore, PageError, RespConnectionError, RespConnector, RespConnectorClient
from lmcache_resp_testing.servers import redis_py


def test_set_get_exists_delete_through_the_bridge_byte_for_byte(bridge: BridgeProcess, redis_server: RedisServer) -> None:
    sizes = [PAGE, 1000, PAGE // 2, 1]
    values = [pattern(size, 40 + i) for i, size in enumerate(sizes)]
    keys = [f"chunk:{i}" for i in range(len(sizes))]
    with RespConnector(bridge=str(bridge.socket)) as connector:
        driver = LMCacheLikeDriver(connector)
        future = connector.submit_batch_set(keys, [memoryview(bytearray(v)) for v in values])
        assert driver.wait(future)[1:3] == (True, "")
        stored = redis_py(redis_server)
        assert [stored.get(k) for k in keys] == values, "stored raw, as LMCache's own connector stores them"

        buffers = [bytearray(size) for size in sizes]
        future = connector.submit_batch_get(keys, [memoryview(b) for b in buffers])
        assert driver.wait(future)[3] == [True] * len(keys)
        assert [bytes(b) for b in buffers] == values

        # A buffer of another length than the value is a miss, and stays untouched.
        wrong = bytearray(b"\xaa" * 999)
        missing = bytearray(b"\xbb" * 16)
        future = connector.submit_batch_get(["chunk:1", "absent"], [memoryview(wrong), memoryview(missing)])
        assert driver.wait(future)[3] == [False, False]
        assert wrong == b"\xaa" * 999 and missing == b"\xbb" * 16

        assert driver.wait(connector.submit_batch_exists([*keys, "absent"]))[3] == [True] * len(keys) + [False]
        assert driver.wait(connector.submit_batch_delete(["chunk:0", "absent"]))[3] == [True, False]
        assert stored.exists("chunk:0") == 0


def test_staging_pages_are_reused_and_go_back_to_the_bridge(bridge: BridgeProcess) -> None:
    connector = RespConnector.attach(str(bridge.socket))
    driver = LMCacheLikeDriver(connector)
    value = pattern(PAGE, 7)
    with PagedRespStore.attach(bridge.socket) as observer:
        for round_ in range(20):
            keys = [f"r{round_}:{i}" for i in range(8)]
            assert driver.wait(connector.submit_batch_set(keys, [memoryview(value)] * 8))[1]
            out = [bytearray(PAGE) for _ in keys]
            assert driver.wait(connector.submit_batch_get(keys, [memoryview(b) for b in out]))[3] == [True] * 8
            assert all(b == value for b in out)
        assert observer.free_pages == PAGES - 8, "eight staging pages, reused for all 40 batches"
        connector.close()
        assert observer.free_pages == PAGES, "closing hands the staging pages back"


def test_a_value_larger_than_the_bridges_pages_is_refused_clearly(bridge: BridgeProcess) -> None:
    with RespConnector(bridge=str(bridge.socket)) as connector:
        with pytest.raises(InvalidInputError, match=r"buffer 1: 65537 bytes do not fit the bridge's 65536-byte pages"):
            connector.submit_batch_set(["a", "b"], [memoryview(bytearray(10)), memoryview(bytearray(PAGE + 1))])
        with pytest.raises(InvalidInputError, match="2 keys but 1 buffers"):
            connector.submit_batch_get(["a", "b"], [memoryview(bytearray(10))])


def test_more_values_in_flight_than_the_pool_holds_is_a_clear_error(bridge: BridgeProcess) -> None:
    with RespConnector(bridge=str(bridge.socket)) as connector:
        driver = LMCacheLikeDriver(connector)
        with pytest.raises(PageError, match=r"staging 65 values through the bridge: out of pages.*larger --num-pages"):
            connector.submit_batch_set([f"k{i}" for i in range(PAGES + 1)], [memoryview(b"x")] * (PAGES + 1))
        # Nothing was lost: the connector still works, within the pool.
        future = connector.submit_batch_set(["k"], [memoryview(b"fits")])
        assert driver.wait(future)[1]


def test_connection_settings_belong_to_the_bridge(bridge: BridgeProcess) -> None:
    with pytest.raises(InvalidInputError, match=r"the bridge holds the connection settings; host, password"):
        RespConnector(bridge=str(bridge.socket), host="10.0.0.1", password="hunter2")
    # LMCache's convention: empty values are "not set", so they are fine next to a bridge.
    with RespConnector(bridge=str(bridge.socket), host="", port=0, timeout=5.0) as connector:
        assert connector.settings is None
        assert connector.endpoint.startswith(f"bridge {bridge.socket} -> ")
        assert "bridge process" in connector.placement["explanation"][0]
        assert connector.placement["io_loop"] is None, "the bridge's engine chose it: the bridge's placement says"


def test_the_bridge_dying_fails_batches_at_once_and_a_new_connector_works_after_a_restart(
    bridge: BridgeProcess,
) -> None:
    connector = RespConnector(bridge=str(bridge.socket))
    driver = LMCacheLikeDriver(connector)
    assert driver.wait(connector.submit_batch_set(["before"], [memoryview(b"v")]))[1]
    bridge.stop(signal.SIGKILL)
    with pytest.raises(RespConnectionError):
        for _ in range(100):  # the first submit may be written before the loss is seen
            future = connector.submit_batch_exists(["before"])
            completion = driver.wait(future, timeout=10)
            assert not completion[1]
    connector.close()
    bridge.start()
    with RespConnector(bridge=str(bridge.socket)) as again:
        out = bytearray(1)
        assert LMCacheLikeDriver(again).wait(again.submit_batch_get(["before"], [memoryview(out)]))[3] == [True]
        assert out == b"v"


def test_lmcache_non_mp_client_over_a_bridge(bridge: BridgeProcess) -> None:
    async def scenario() -> None:
        client = RespConnectorClient(RespConnector(bridge=str(bridge.socket)))
        try:
            chunk = pattern(4096, 9)
            await client.batch_set(["a", "b"], [memoryview(chunk), memoryview(chunk)])
            out = [bytearray(4096), bytearray(4096)]
            assert await client.batch_get(["a", "b"], [memoryview(b) for b in out]) == [True, True]
            assert out == [bytearray(chunk)] * 2
            # The blocking variants, from another thread while the loop runs.
            found: list[list[bool]] = []
            worker = threading.Thread(target=lambda: found.append(client.batch_exists_sync(["a", "zz"])))
            worker.start()
            while worker.is_alive():
                await asyncio.sleep(0.01)
            assert found == [[True, False]]
        finally:
            client.close()

    asyncio.run(scenario())


def test_registered_regions_need_the_engine_in_this_process(bridge: BridgeProcess) -> None:
    """The bridge's engine cannot reach this process's memory: regions are refused, clearly."""
    import numpy as np

    with RespConnector(bridge=str(bridge.socket)) as connector:
        with pytest.raises(InvalidInputError, match="registered regions need the I/O engine in this process"):
            connector._native.register_region(np.zeros(4096, dtype=np.uint8))
