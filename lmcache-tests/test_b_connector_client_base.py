"""Facts about LMCache's own non-MP client, ``ConnectorClientBase`` (the same in 0.5.6 and 0.5.7rc2)
(lmcache/v1/storage_backend/native_clients/connector_client_base.py), checked with our
RespConnector underneath. They explain why the plugin drives RespConnector through
RespConnectorClient, and not through LMCache's class.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from lmc_helpers import RedisServer, run_on

from lmcache.v1.storage_backend.native_clients.connector_client_base import ConnectorClientBase

from lmcache_resp import RespConnector, RespConnectorClient
from lmcache_resp_testing.servers import redis_py


class SlowRegistration(RespConnector):
    """Holds the submitting thread for a moment after the submit: the window between
    ``submit_batch_exists`` and the future's registration, widened so it is always hit."""

    def submit_batch_exists(self, keys: Any) -> int:
        future_id = super().submit_batch_exists(keys)
        time.sleep(0.3)  # the batch completes and the loop drains it meanwhile
        return future_id


def blocks_for(call: Any, seconds: float) -> bool:
    """True when ``call()`` has not returned after ``seconds`` (it is left blocked, daemon)."""
    done = threading.Event()

    def run() -> None:
        try:
            call()
        except Exception:  # noqa: BLE001 - close() fails the stuck future later: not the point
            pass
        done.set()

    threading.Thread(target=run, daemon=True).start()
    return not done.wait(seconds)


def test_lmcaches_client_loses_a_sync_exists_completion(redis_server: RedisServer, lmcache_loop: Any) -> None:
    """batch_exists_sync (lines 153-156) submits, then registers its future; a completion
    drained by the loop thread in between finds no entry and is dropped (lines 42-44), so
    fut.result() (no timeout) waits forever. LMCache calls it from worker threads:
    RESPConnector.batched_contains (redis_connector.py:170), via RemoteBackend.batched_contains."""
    connector = SlowRegistration(host="127.0.0.1", port=redis_server.port, num_workers=1, cpu_affinity="none")

    async def build() -> Any:
        return ConnectorClientBase(connector, asyncio.get_running_loop())

    client = run_on(lmcache_loop, build())
    try:
        assert blocks_for(lambda: client.batch_exists_sync(["k"]), 3.0)
    finally:
        lmcache_loop.call_soon_threadsafe(client.close)


def test_our_client_keeps_it(redis_server: RedisServer, lmcache_loop: Any) -> None:
    """RespConnectorClient holds one lock across submit + registration and while draining."""
    connector = SlowRegistration(host="127.0.0.1", port=redis_server.port, num_workers=1, cpu_affinity="none")
    client = RespConnectorClient(connector, lmcache_loop)
    try:
        redis_py(redis_server).set("k", b"v")
        assert client.batch_exists_sync(["k", "nope"]) == [True, False]
    finally:
        client.close()


def test_lmcaches_client_reports_a_get_miss_like_a_hit(redis_server: RedisServer, lmcache_loop: Any) -> None:
    """batch_get resolves None for any batch whose completion is ok (line 62): the per-key
    bits are dropped. Native connectors (LMCache's C++ one too, connector_base.h:314-324)
    report a missing key as a False bit in an ok batch, so a miss and a hit look the same,
    and LMCache's RESPConnector._get (redis_connector.py:76-89) returns the unfilled buffer."""
    connector = RespConnector(host="127.0.0.1", port=redis_server.port, num_workers=1, cpu_affinity="none")
    redis_py(redis_server).set("hit", b"x" * 64)

    async def scenario() -> tuple[Any, Any]:
        client = ConnectorClientBase(connector, asyncio.get_running_loop())
        try:
            hit = await client.batch_get(["hit"], [memoryview(bytearray(64))])
            miss = await client.batch_get(["missing"], [memoryview(bytearray(64))])
            return hit, miss
        finally:
            client.close()

    assert run_on(lmcache_loop, scenario()) == (None, None)
