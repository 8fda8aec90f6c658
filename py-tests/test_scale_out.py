"""Past one server, from Python: Redis Cluster turned on by keyword, URL or LMCache's JSON;
static sharding over independent servers; Unix sockets for the store and the connector. Every
byte is read back, and where the keys live is checked with redis-py, independently."""

from __future__ import annotations

import json
import zlib

import pytest
from conftest import LMCacheLikeDriver, RedisCluster, RedisServer, lmcache_pool, pattern

from lmcache_resp import InvalidInputError, PagedRespStore, RespConnectionError, RespConnector, RespSettings
from lmcache_resp_testing.servers import redis_py

PAGE = 8192


def round_trip(store: PagedRespStore, keys: list[str]) -> None:
    pages = store.allocate_many(len(keys))
    for i, page in enumerate(pages):
        page.write_bytes(pattern(PAGE, i))
    store.put(keys, pages)
    for page in pages:
        page.write_bytes(bytes(PAGE))
    assert store.get(keys, pages) == [True] * len(keys)
    assert [bytes(p.byte_array) for p in pages] == [pattern(PAGE, i) for i in range(len(keys))]
    for page in pages:
        store.free(page)


def cluster_seeds(cluster: RedisCluster) -> str:
    return ",".join(f"{n.host}:{n.port}" for n in cluster.nodes)


def slot_of(key: str) -> int:
    """The key's Redis Cluster slot, computed here without lmcache_resp (CRC16-XMODEM)."""
    data = key.encode()
    start = data.find(b"{")
    if start >= 0:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc % 16384


@pytest.mark.parametrize("how", ["keyword", "url", "seed-list"])
def test_the_store_on_a_cluster(redis_cluster: RedisCluster, how: str) -> None:
    seed = redis_cluster.nodes[0]
    kwargs: dict[str, object] = {"page_size": PAGE, "num_pages": 64, "num_workers": 2}
    if how == "keyword":
        store = PagedRespStore(f"redis://{seed.host}:{seed.port}", cluster=True, **kwargs)  # type: ignore[arg-type]
    elif how == "url":
        store = PagedRespStore(f"redis://{seed.host}:{seed.port}?cluster=true", **kwargs)  # type: ignore[arg-type]
    else:
        store = PagedRespStore(f"redis://{cluster_seeds(redis_cluster)}?cluster=true", **kwargs)  # type: ignore[arg-type]
    with store:
        assert store.settings.cluster and store._native.endpoint.startswith(("cluster ", "127.0.0.1"))
        keys = [f"model@{i:08x}@0@{i * 7919:x}" for i in range(48)]
        round_trip(store, keys)
        assert store.exists(keys) == [True] * 48
    holders = {n.port: set() for n in redis_cluster.nodes}
    for node in redis_cluster.nodes:
        with redis_py(redis_cluster, node) as client:
            holders[node.port] = {k.decode() for k in client.keys("model@*")}
    assert set().union(*holders.values()) == set(keys)
    assert sum(len(h) for h in holders.values()) == 48, "every key on exactly one primary"
    with redis_py(redis_cluster, redis_cluster.nodes[0]) as client:
        owners = {int(s): p for s, e, (_ip, p, *_), *_ in client.execute_command("CLUSTER SLOTS") for s in range(s, e + 1)}
    for key in keys:
        assert key in holders[owners[slot_of(key)]], f"{key} is not on its slot's primary"


def test_the_lmcache_connector_on_a_cluster_from_its_json(redis_cluster: RedisCluster) -> None:
    seed = redis_cluster.nodes[0]
    document = {"type": "native_plugin", "module_path": "lmcache_resp.lmcache.mp", "class_name": "RespConnector",
                "adapter_params": {"host": seed.host, "port": seed.port, "cluster": True, "num_workers": 2}}
    assert RespSettings.from_lmcache(json.dumps(document), env={}).cluster
    connector = RespConnector(**document["adapter_params"])  # as LMCache's native_plugin loader builds it
    driver = LMCacheLikeDriver(connector)
    keys = [f"mp@{i}" for i in range(30)]
    _pool, views = lmcache_pool([4096] * 30)
    for i, view in enumerate(views):
        view[:] = pattern(4096, i)
    assert driver.wait(connector.submit_batch_set(keys, views))[1]
    _pool2, out = lmcache_pool([4096] * 30)
    _, ok, _, hits = driver.wait(connector.submit_batch_get(keys, out))
    assert ok and hits == [True] * 30
    assert [bytes(v) for v in out] == [pattern(4096, i) for i in range(30)]
    connector.close()


def test_cluster_true_against_a_plain_server_or_dead_seeds_is_a_clear_error(redis_server: RedisServer) -> None:
    with pytest.raises(InvalidInputError, match="is not a cluster node"):
        PagedRespStore(f"redis://127.0.0.1:{redis_server.port}?cluster=true", page_size=PAGE, num_pages=1)
    with pytest.raises(RespConnectionError, match="no seed node of the cluster answered"):
        PagedRespStore("redis://127.0.0.1:1,127.0.0.1:2?cluster=true", page_size=PAGE, num_pages=1, timeout=2)


def test_independent_servers_share_the_keys_by_a_stable_hash(tmp_path_factory: pytest.TempPathFactory) -> None:
    servers = [RedisServer(tmp_path_factory.mktemp(f"shard{i}")) for i in range(3)]
    try:
        url = "redis://" + ",".join(f"127.0.0.1:{s.port}" for s in servers)
        keys = [f"shard-key-{i}" for i in range(60)]
        with PagedRespStore(url, page_size=PAGE, num_pages=60, num_workers=2) as store:
            assert store.settings.endpoints == [f"127.0.0.1:{s.port}" for s in servers]
            round_trip(store, keys)
        counts = [redis_py(s).dbsize() for s in servers]
        assert sum(counts) == 60 and all(c >= 8 for c in counts), counts
        # The same list in another order routes every key to the same server.
        reordered = "redis://" + ",".join(f"127.0.0.1:{s.port}" for s in reversed(servers))
        with PagedRespStore(reordered, page_size=PAGE, num_pages=60, num_workers=2) as store:
            pages = store.allocate_many(60)
            assert store.get(keys, pages) == [True] * 60
            assert [bytes(p.byte_array) for p in pages] == [pattern(PAGE, i) for i in range(60)]
    finally:
        for server in servers:
            server.kill()


def test_unix_sockets_for_the_store_and_the_connector(unix_server: RedisServer) -> None:
    assert unix_server.unix_path is not None
    url = f"unix://{unix_server.unix_path}"
    with PagedRespStore(url, page_size=PAGE, num_pages=16, num_workers=2) as store:
        assert store._native.endpoint == f"unix:{unix_server.unix_path}"
        round_trip(store, [f"unix-{i}" for i in range(16)])
    connector = RespConnector(url=url, num_workers=2)
    driver = LMCacheLikeDriver(connector)
    _pool, views = lmcache_pool([PAGE] * 4)
    _, ok, _, hits = driver.wait(connector.submit_batch_get([f"unix-{i}" for i in range(4)], views))
    assert ok and hits == [True] * 4 and bytes(views[3]) == pattern(PAGE, 3)
    connector.close()
    assert zlib.crc32(redis_py(unix_server).get("unix-0") or b"") == zlib.crc32(pattern(PAGE, 0))
