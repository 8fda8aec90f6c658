"""Large values read in pieces (``get_piece_bytes``) through every front: the store, LMCache's
connector, RedisClient and the bridge, byte for byte, with the same contracts as whole GETs
(exact-length misses leave the buffer untouched). The faults between pieces are tested
against a real server in native-tests/tests/ranged.rs."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from conftest import BridgeProcess, LMCacheLikeDriver, RedisServer, lmcache_pool, pattern

from lmcache_resp import InvalidInputError, PagedRespStore, RedisClient, RespConnector, RespSettings

PIECE = 64 * 1024
# Around piece boundaries, and several pieces.
SIZES = [PIECE - 1, PIECE, PIECE + 1, 3 * PIECE, 5 * PIECE + 17]


def test_the_setting_is_resolved_like_any_other() -> None:
    assert RespSettings.resolve(env={}).get_piece_bytes == "auto"
    assert RespSettings.resolve("redis://h:1?get_piece_bytes=0", env={}).get_piece_bytes == 0
    assert RespSettings.resolve("redis://h:1?get_piece_bytes=AUTO", env={}).get_piece_bytes == "auto"
    assert RespSettings.resolve(get_piece_bytes=8192, env={}).to_dict()["get_piece_bytes"] == 8192
    assert RespSettings.resolve(get_piece_bytes="auto", env={}).to_dict()["get_piece_bytes"] == "auto"
    for wrong in ("sometimes", 100, -1):
        with pytest.raises(InvalidInputError, match='get_piece_bytes must be "auto"'):
            RespSettings.resolve(get_piece_bytes=wrong, env={})


def test_the_store_reads_large_values_in_pieces_byte_for_byte(redis_server: RedisServer) -> None:
    url = f"resp://127.0.0.1:{redis_server.port}"
    with PagedRespStore(url, page_size=6 * PIECE, num_pages=len(SIZES), num_workers=2, get_piece_bytes=PIECE) as store:
        pages = store.allocate_many(len(SIZES))
        values = [pattern(size, i) for i, size in enumerate(SIZES)]
        keys = [f"ranged:{i}" for i in range(len(SIZES))]
        for page, value in zip(pages, values):
            page.write_bytes(value)
        store.put(keys, pages, lengths=SIZES)
        for page in pages:
            page.write_bytes(b"\x5a" * (6 * PIECE))
        assert store.get_lengths(keys, pages) == SIZES
        for page, value in zip(pages, values):
            data = bytes(page.byte_array)
            assert data[: len(value)] == value
            assert data[len(value) :] == b"\x5a" * (6 * PIECE - len(value)), "nothing past the value"
        assert store.get(["absent"], pages[:1]) == [False]


def test_the_connector_reads_fixed_size_chunks_in_pieces_and_misses_other_lengths(redis_server: RedisServer) -> None:
    connector = RespConnector(host="127.0.0.1", port=redis_server.port, num_workers=2, get_piece_bytes=PIECE)
    driver = LMCacheLikeDriver(connector)
    _pool, views = lmcache_pool(SIZES)
    values = [pattern(size, 10 + i) for i, size in enumerate(SIZES)]
    for view, value in zip(views, values):
        view[:] = value
    keys = [f"chunk:{i}" for i in range(len(SIZES))]
    assert driver.wait(connector.submit_batch_set(keys, views))[1:3] == (True, "")
    _pool2, outs = lmcache_pool(SIZES)
    assert driver.wait(connector.submit_batch_get(keys, outs))[3] == [True] * len(SIZES)
    assert [bytes(v) for v in outs] == values
    # A chunk buffer one byte off the stored length: a miss, the buffer untouched.
    _pool3, off = lmcache_pool([SIZES[-1] + 1, SIZES[-1] - 1])
    assert driver.wait(connector.submit_batch_get([keys[-1], keys[-1]], off))[3] == [False, False]
    assert all(bytes(v) == bytes(len(v)) for v in off)
    connector.close()


def test_redis_client_reads_in_pieces(redis_server: RedisServer) -> None:
    with RedisClient("127.0.0.1", redis_server.port, get_piece_bytes=PIECE) as client:
        value = pattern(4 * PIECE + 3, 5)
        client.set("big", value)
        out = bytearray(5 * PIECE)
        assert client.get("big", out) == len(value)
        assert bytes(out[: len(value)]) == value
        assert client.get("absent", out) is None


def test_the_bridge_reads_in_pieces_for_its_clients(redis_server: RedisServer, tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{redis_server.port}?get_piece_bytes=16384"
    bridge = BridgeProcess(url, tmp_path / "bridge.sock")
    try:
        with PagedRespStore.attach(bridge.socket) as store:
            page, = store.allocate_many(1)
            value = pattern(page.size, 7)
            page.write_bytes(value)
            store.put(["through"], [page])
            page.write_bytes(bytes(page.size))
            assert store.get(["through"], [page]) == [True]
            assert bytes(page.byte_array) == value
    finally:
        bridge.stop(signal.SIGKILL)


def test_stats_say_what_each_server_is_and_how_its_large_values_are_read(redis_server: RedisServer) -> None:
    """get_piece_bytes="auto": whole GETs from Valkey 9 (it writes big replies without copying
    them), 1 MiB pieces from Redis 7.0 and Valkey 8.1; stats() names both facts per endpoint."""
    expected = {"redis": ("redis", "pieces of 1 MiB"), "valkey": ("valkey", "pieces of 1 MiB"),
                "valkey9": ("valkey", "whole GETs")}
    choice = os.environ.get("REDIS_TEST_SERVER") or "redis"
    if choice not in expected:
        pytest.skip(f"REDIS_TEST_SERVER={choice} names a binary: what it is is not known here")
    product, reads = expected[choice]
    with PagedRespStore(f"resp://127.0.0.1:{redis_server.port}", page_size=1 << 20, num_pages=1) as store:
        endpoint = store.stats().endpoints[f"127.0.0.1:{redis_server.port}"]
        assert (endpoint.server, endpoint.reads) == (f"{product} {redis_server.version()}", reads)
