"""key_prefix and ttl_seconds (LMCache's valkey-adapter namespace and expiry) on every front,
against real servers: the wire keys are `<prefix>@<key>` as redis-py sees them, another
prefix's keys are invisible, SETs carry their expiry, and the server's volatile-lru evicts them."""

from __future__ import annotations

import asyncio
import select
import time
import types
import urllib.parse
from pathlib import Path

import numpy as np
import pytest
from conftest import BridgeProcess, RedisServer, pattern

from lmcache_resp import (
    InvalidInputError,
    PagedRespStore,
    RedisClient,
    RespConnector,
    RespConnectorClient,
    RespSettings,
    ServerError,
)
from lmcache_resp.lmcache import non_mp
from lmcache_resp_testing.servers import redis_py

PAGE = 64 * 1024
KEYS = [f"Qwen/Qwen3-14B@{i:08x}@0@{'ab' * 32}" for i in range(4)]


def complete(connector: RespConnector, future_id: int) -> tuple[int, bool, str, list[bool] | None]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        select.select([connector.event_fd()], [], [], 1)
        for completion in connector.drain_completions():
            if completion[0] == future_id:
                return completion
    raise AssertionError(f"batch {future_id} did not complete")


def seed_other_namespace(server: RedisServer) -> dict[str, bytes]:
    """The same keys under another prefix and with none: what a namespace must never see."""
    other = {f"tenantB@{k}": pattern(100, 7) for k in KEYS} | {k: pattern(100, 8) for k in KEYS}
    redis_py(server).mset(other)
    return other


def assert_namespace_kept(server: RedisServer, values: list[bytes], others: dict[str, bytes]) -> None:
    r = redis_py(server)
    for key, value in zip(KEYS, values):
        assert r.get(f"tenantA@{key}") == value, key
    for key, value in others.items():
        assert r.get(key) == value, f"{key} of another namespace was touched"


# --- every front -------------------------------------------------------------------------


def test_paged_store_sync_and_async_stay_in_their_namespace(redis_server: RedisServer, clean_env) -> None:
    others = seed_other_namespace(redis_server)
    values = [pattern(PAGE, i) for i in range(len(KEYS))]
    with PagedRespStore(f"redis://127.0.0.1:{redis_server.port}?key_prefix=tenantA", page_size=PAGE, num_pages=8,
                        num_workers=2) as store:
        assert store.settings is not None and store.settings.key_prefix == "tenantA"
        pages = store.allocate_many(len(KEYS))
        for page, value in zip(pages, values):
            page.write_bytes(value)
        store.put(KEYS[:2], pages[:2])
        asyncio.run(store.aput(KEYS[2:], pages[2:]))
        assert_namespace_kept(redis_server, values, others)
        outs = store.allocate_many(len(KEYS))
        assert store.get(KEYS, outs) == [True] * len(KEYS)
        assert [bytes(o.byte_array) for o in outs] == values
        assert asyncio.run(store.aexists(KEYS + ["absent"])) == [True] * len(KEYS) + [False]
        assert store.delete(KEYS[:2]) == [True, True]
        assert asyncio.run(store.adelete(KEYS[:2])) == [False, False]
        assert store.exists(KEYS) == [False, False, True, True]
    r = redis_py(redis_server)
    assert sorted(k.decode() for k in r.keys("tenantA@*")) == sorted(f"tenantA@{k}" for k in KEYS[2:])
    for key, value in others.items():
        assert r.get(key) == value, key


def test_another_namespace_s_keys_are_invisible(redis_server: RedisServer, clean_env) -> None:
    others = seed_other_namespace(redis_server)
    with PagedRespStore(f"redis://127.0.0.1:{redis_server.port}", key_prefix="tenantA", page_size=PAGE, num_pages=4,
                        num_workers=2) as store:
        pages = store.allocate_many(len(KEYS))
        assert store.exists(KEYS) == [False] * len(KEYS)
        assert store.get(KEYS, pages) == [False] * len(KEYS)
        assert store.delete(KEYS) == [False] * len(KEYS)
    r = redis_py(redis_server)
    assert {k: r.get(k) for k in others} == others


def test_redis_client_uses_the_namespace(redis_server: RedisServer, clean_env) -> None:
    others = seed_other_namespace(redis_server)
    with RedisClient("127.0.0.1", redis_server.port, key_prefix="tenantA", ttl_seconds=600) as client:
        assert client.exists(KEYS[0]) is False
        values = [pattern(1000 + i, i) for i in range(len(KEYS))]
        for key, value in zip(KEYS, values):
            client.set(key, value)
        assert_namespace_kept(redis_server, values, others)
        dest = bytearray(2000)
        assert client.get(KEYS[1], dest) == len(values[1]) and bytes(dest[: len(values[1])]) == values[1]
        assert client.delete(KEYS[0]) is True and client.exists(KEYS[0]) is False
    r = redis_py(redis_server)
    assert all(0 < r.pttl(f"tenantA@{k}") <= 600_000 for k in KEYS[1:])
    assert all(r.pttl(k) == -1 for k in others), "other namespaces' keys keep no expiry"


def test_mp_connector_and_non_mp_plugin_from_their_configs(redis_server: RedisServer, clean_env) -> None:
    others = seed_other_namespace(redis_server)
    # MP: LMCache hands RespConnector(**adapter_params); the valkey adapter's field names work.
    connector = RespConnector(startup_nodes=f"127.0.0.1:{redis_server.port}", key_prefix="tenantA",
                              ttl_seconds=600, num_workers=2)
    values = [pattern(300, i) for i in range(len(KEYS))]
    arrays = [np.frombuffer(v, dtype=np.uint8).copy() for v in values]
    assert complete(connector, connector.submit_batch_set(KEYS[:2], [memoryview(a) for a in arrays[:2]]))[1]
    assert complete(connector, connector.submit_batch_exists(KEYS))[3] == [True, True, False, False]
    connector.close()

    # Non-MP: the remote_storage_plugin.<name>.* keys of LMCache's YAML extra_config.
    class Config:
        remote_storage_plugins = ["resp"]
        extra_config = {
            "remote_storage_plugin.resp.module_path": "lmcache_resp.lmcache.non_mp",
            "remote_storage_plugin.resp.class_name": "RespRemoteConnector",
            "remote_storage_plugin.resp.startup_nodes": f"127.0.0.1:{redis_server.port}",
            "remote_storage_plugin.resp.key_prefix": "tenantA",
            "remote_storage_plugin.resp.ttl_seconds": 600,
            "remote_storage_plugin.resp.num_workers": 2,
        }

    settings = non_mp.settings_from_lmcache_config(Config())
    assert (settings.key_prefix, settings.ttl_seconds) == ("tenantA", 600)

    async def scenario() -> list[bool]:
        client = RespConnectorClient.from_settings(settings)
        await client.batch_set(KEYS[2:], [memoryview(a) for a in arrays[2:]])
        outs = [bytearray(300) for _ in KEYS]
        hits = await client.batch_get(KEYS, [memoryview(o) for o in outs])
        assert [bytes(o) for o in outs] == values
        client.close()
        return hits

    assert asyncio.run(asyncio.wait_for(scenario(), 30)) == [True] * len(KEYS)
    assert_namespace_kept(redis_server, values, others)
    r = redis_py(redis_server)
    assert all(0 < r.pttl(f"tenantA@{k}") <= 600_000 for k in KEYS)


def test_a_bridge_serves_its_namespace_to_every_client(redis_server: RedisServer, tmp_path: Path) -> None:
    others = seed_other_namespace(redis_server)
    bridge = BridgeProcess(f"redis://127.0.0.1:{redis_server.port}?key_prefix=tenantA&ttl_seconds=600",
                           tmp_path / "bridge.sock")
    try:
        values = [pattern(1000, i) for i in range(len(KEYS))]
        with PagedRespStore.attach(bridge.socket) as store:
            pages = store.allocate_many(len(KEYS))
            for page, value in zip(pages, values):
                page.write_bytes(value)
            store.put(KEYS, pages, lengths=[1000] * len(KEYS))
            assert store.exists(KEYS) == [True] * len(KEYS)
        assert_namespace_kept(redis_server, values, others)
        r = redis_py(redis_server)
        assert all(0 < r.pttl(f"tenantA@{k}") <= 600_000 for k in KEYS)
    finally:
        bridge.stop()


def test_the_cluster_routes_by_the_whole_prefixed_key(redis_cluster, clean_env) -> None:  # type: ignore[no-untyped-def]
    keys = [f"model@{i:08x}@0@{i:064x}" for i in range(64)]
    with PagedRespStore(redis_cluster.seed_url + "?cluster=true&key_prefix=tenantA", page_size=PAGE, num_pages=8,
                        num_workers=2) as store:
        pages = store.allocate_many(8)
        for page in pages:
            page.write_bytes(pattern(500, 1))
        for start in range(0, len(keys), 8):
            store.put(keys[start:start + 8], pages, lengths=[500] * 8)
        assert store.exists(keys) == [True] * len(keys)
        # Slots are those of `tenantA@<key>`, the server's own: not one request was redirected.
        assert store.stats().moved == 0
    # Every key lies on the node that owns its prefixed name's slot.
    stored = {k.decode() for node in redis_cluster.primaries() for k in redis_py(redis_cluster, node).keys("*")}
    assert stored == {f"tenantA@{k}" for k in keys}


# --- a tenant choosing key names against another -----------------------------------------

# Prefixes that begin alike, differ by a space, a NUL byte or non-ASCII text, and one of the
# longest accepted (1024 bytes). "t@x", another's prefix plus '@', is refused (below).
TENANTS = ["t", "tx", "t ", "\x00", "é", "x" * 1024]
# Keys with '@' where LMCache's have them, at either end, alone, and named like another
# tenant's whole wire key.
TENANT_KEYS = ["k", "a@b", "@", "@k", "k@", "t@k", "tx@k", "t@x@k"]


def attack_names(attacker: str, victim: str) -> set[bytes]:
    """Every name an attacker would try for the victim's keys: the key, its wire key, each tail
    of the wire key after an '@', and the wire key less as many bytes as the attacker's own
    `<prefix>@` adds."""
    names: set[bytes] = set()
    for key in TENANT_KEYS:
        wire = f"{victim}@{key}".encode()
        names |= {key.encode(), wire, wire[len(attacker.encode()) + 1:]}
        names |= {wire[i + 1:] for i, byte in enumerate(wire) if byte == ord("@")}
    return names


def test_no_key_name_reaches_another_namespace_s_keys(redis_server: RedisServer, clean_env) -> None:
    """Each tenant stores its keys; then each, from its own namespace, tries every other's keys by
    every name in `attack_names`: it reads nothing (EXISTS False, GET None), deletes nothing, and
    its SETs under those names land in its own namespace. Every tenant's bytes stay as they were.
    (Why no name can work: a prefix holds no '@', so the first '@' of a wire key ends its prefix;
    `settings/namespace.rs` has the proof as a property test.)"""
    r = redis_py(redis_server)
    clients = {t: RedisClient("127.0.0.1", redis_server.port, key_prefix=t) for t in TENANTS}
    owned = {(t, k): pattern(300, 17 * i + j) for i, t in enumerate(TENANTS) for j, k in enumerate(TENANT_KEYS)}
    for (tenant, key), value in owned.items():
        clients[tenant].set(key, value)
    assert r.dbsize() == len(owned), "every (prefix, key) pair is its own server key"
    junk = b"overwritten by another tenant"
    for attacker, client in clients.items():
        for victim in TENANTS:
            if victim == attacker:
                continue
            names = sorted(attack_names(attacker, victim) - {k.encode() for k in TENANT_KEYS})
            dest = bytearray(1000)
            for name in names:
                assert client.exists(name) is False, (attacker, victim, name)
                assert client.get(name, dest) is None, (attacker, victim, name)
                assert client.delete(name) is False, (attacker, victim, name)
                client.set(name, junk)
                assert client.get(name, dest) == len(junk)
                assert client.delete(name) is True
    for (tenant, key), value in owned.items():
        assert r.get(f"{tenant}@{key}".encode()) == value, f"{tenant!r}'s {key!r} was touched"
    assert r.dbsize() == len(owned)
    for client in clients.values():
        client.close()
    with pytest.raises(InvalidInputError, match="must not contain '@'"):
        RedisClient("127.0.0.1", redis_server.port, key_prefix="t@x")


def test_a_client_without_a_prefix_shares_every_namespace(redis_server: RedisServer, clean_env) -> None:
    """What the format cannot keep apart, as LMCache's valkey adapter has it (an empty prefix is
    the unprefixed wire key): a client with no `key_prefix` reads every prefixed key by its
    whole wire name. Namespaces keep tenants apart only when every client sharing the server
    has a prefix (docs/reliability.md)."""
    with RedisClient("127.0.0.1", redis_server.port, key_prefix="t") as tenant, \
            RedisClient("127.0.0.1", redis_server.port) as unprefixed:
        tenant.set("k", b"tenant t's bytes")
        dest = bytearray(100)
        assert unprefixed.get("t@k", dest) == 16 and bytes(dest[:16]) == b"tenant t's bytes"


# --- capacity tracking counts its own namespace only ------------------------------------


@pytest.mark.parametrize(("prefix", "foreign_keys"), [
    ("tenantA", [f"tenantB@big:{i}" for i in range(5)]),
    # Keys a tenant "t" would evict if the prefix were matched as text, or the keys' own '@'
    # counted: another prefix starting with "t", unprefixed keys, and keys of "t " and "tx".
    ("t", ["tx@cap:0", "cap:1", "t @cap:2", "@cap:3", "tx@t@cap:4"]),
])
def test_capacity_eviction_never_touches_another_namespace(
    redis_server: RedisServer, clean_env, prefix: str, foreign_keys: list[str]
) -> None:
    r = redis_py(redis_server)
    foreign = {key: pattern(100_000, i) for i, key in enumerate(foreign_keys)}
    r.mset(foreign)
    connector = RespConnector.from_settings(RespSettings.resolve(
        host="127.0.0.1", port=redis_server.port, num_workers=2, key_prefix=prefix, max_capacity_gb=2**-10,
        eviction={"eviction_policy": "LRU", "trigger_watermark": 0.8, "eviction_ratio": 0.2},
    ))
    values = [np.frombuffer(pattern(100_000, i), dtype=np.uint8).copy() for i in range(9)]
    keys = [f"cap:{i}" for i in range(9)]
    for key, value in zip(keys, values):
        assert complete(connector, connector.submit_batch_set([key], [memoryview(value)]))[1]

    def own() -> list[bytes]:
        return sorted(k for k in r.keys() if k.decode().startswith(f"{prefix}@"))

    deadline = time.monotonic() + 10
    while len(own()) != 7:
        assert time.monotonic() < deadline, own()
        time.sleep(0.01)
    stats = connector.capacity_stats
    assert stats is not None and (stats["stored_bytes"], stats["keys"], stats["evictions"]) == (700_000, 7, 2)
    assert own() == sorted(f"{prefix}@cap:{i}".encode() for i in range(2, 9))
    assert {k: r.get(k) for k in foreign} == foreign, "the other namespace's 500 kB were neither counted nor evicted"
    connector.close()


# --- TTL ---------------------------------------------------------------------------------


def test_every_stored_key_carries_its_ttl_and_expires(redis_server: RedisServer, clean_env) -> None:
    r = redis_py(redis_server)
    r.set("no-ttl", b"x")
    with PagedRespStore(f"redis://127.0.0.1:{redis_server.port}?ttl_seconds=2", page_size=PAGE, num_pages=8,
                        num_workers=2) as store:
        pages = store.allocate_many(8)
        for i, page in enumerate(pages):
            page.write_bytes(pattern(PAGE, i))
        keys = [f"ttl:{i}" for i in range(8)]
        store.put(keys, pages)
        ttls = [r.pttl(k) for k in keys]
        assert all(0 < t <= 2000 for t in ttls), ttls
        assert r.get("ttl:3") == pattern(PAGE, 3)
        deadline = time.monotonic() + 10
        while any(store.exists(keys)):
            assert time.monotonic() < deadline, "keys with a 2 s TTL outlived 10 s"
            time.sleep(0.1)
        assert store.get(keys, pages) == [False] * 8
    assert r.get("no-ttl") == b"x" and r.pttl("no-ttl") == -1


def test_volatile_lru_evicts_ttl_keys_where_keys_without_one_fill_the_server(redis_server: RedisServer) -> None:
    r = redis_py(redis_server)
    r.config_set("maxmemory", str(8 << 20))
    r.config_set("maxmemory-policy", "volatile-lru")
    try:
        # 40 MB of 256 kB values into an 8 MB server: with a TTL each key is evictable, so
        # every write succeeds and the oldest keys go.
        with RedisClient("127.0.0.1", redis_server.port, ttl_seconds=3600) as client:
            for i in range(160):
                client.set(f"vol:{i}", pattern(256 * 1024, i))
        assert r.info("stats")["evicted_keys"] > 0
        assert r.dbsize() < 160 and r.exists("vol:159") == 1
        dest = bytearray(256 * 1024)
        with RedisClient("127.0.0.1", redis_server.port) as client:
            assert client.get("vol:159", dest) == len(dest) and bytes(dest) == pattern(256 * 1024, 159)
            # Without a TTL, nothing is evictable under volatile-lru: the server refuses.
            r.flushall()
            with pytest.raises(ServerError, match="OOM"):
                for i in range(160):
                    client.set(f"fixed:{i}", pattern(256 * 1024, i))
    finally:
        r.config_set("maxmemory", "0")
        r.config_set("maxmemory-policy", "noeviction")


# --- settings in every form --------------------------------------------------------------


def test_namespace_settings_in_every_form(clean_env) -> None:
    for settings in (
        RespSettings.resolve(key_prefix="m1", ttl_seconds=30),
        RespSettings.resolve("redis://h:1?key_prefix=m1&ttl_seconds=30"),
        RespSettings.from_lmcache({"type": "native_plugin", "module_path": "lmcache_resp.lmcache.mp",
                                   "class_name": "RespConnector",
                                   "adapter_params": {"host": "h", "port": 1, "key_prefix": "m1", "ttl_seconds": 30}}),
        RespSettings.from_lmcache({"type": "valkey", "startup_nodes": "h:1", "key_prefix": "m1", "ttl_seconds": 30,
                                   "max_capacity_gb": 0}),
    ):
        assert (settings.key_prefix, settings.ttl_seconds) == ("m1", 30), settings
        assert 'key_prefix="m1" ttl=30s' in repr(settings)
        assert settings.to_dict()["key_prefix"] == "m1" and settings.to_dict()["ttl_seconds"] == 30
    assert RespSettings.resolve(key_prefix="").key_prefix is None


def test_the_valkey_adapter_s_config_moves_over_unchanged(clean_env) -> None:
    valkey = {"type": "valkey", "startup_nodes": "h1:7000,h2:7001", "cluster_mode": True, "tls_enable": False,
              "request_timeout": 2.5, "connection_timeout": 4, "username": "u", "password": "hunter2",
              "key_prefix": "tenantA", "num_workers": 4}
    ours = {"type": "native_plugin", "module_path": "lmcache_resp.lmcache.mp", "class_name": "RespConnector",
            "adapter_params": {k: v for k, v in valkey.items() if k != "type"}}
    for document in (valkey, ours):
        s = RespSettings.from_lmcache(document)
        assert (s.endpoints, s.cluster, s.ssl, s.timeout, s.connect_timeout) == (
            ["h1:7000", "h2:7001"], True, False, 2.5, 4.0)
        assert (s.username, s.password.reveal(), s.key_prefix, s.num_workers) == ("u", "hunter2", "tenantA", 4)
        assert "hunter2" not in repr(s) and "hunter2" not in str(s.to_dict())
    s = RespSettings.from_lmcache({"type": "valkey", "startup_nodes": "h:6380", "database_id": 3})
    assert (s.endpoints, s.db, s.cluster) == (["h:6380"], 3, False)


@pytest.mark.parametrize(("given", "message"), [
    ({"key_prefix": "a@b"}, "key_prefix must not contain '@'"),
    ({"ttl_seconds": 0}, "ttl_seconds must be a whole number of seconds"),
    ({"ttl_seconds": True}, "ttl_seconds must be a whole number of seconds"),
    ({"ttl_seconds": 1.5}, "ttl_seconds must be a whole number of seconds"),
    ({"ttl_seconds": 60, "max_capacity_gb": 1}, "two owners of eviction"),
    ({"startup_nodes": "h:1", "url": "redis://other:1"}, "name different servers"),
    ({"startup_nodes": "h:1", "cluster_mode": True, "database_id": 2}, "database_id applies to a standalone"),
    ({"cluster_mode": True, "cluster": False}, "disagree"),
    ({"startup_nodes": "h:1", "password": "hunter2", "host": "h"}, "not both"),
    # Issue #36: the query's '@' ended the "password", the host became "b", the prefix was lost.
    ({"url": "redis://:hunter2@h:1?key_prefix=a@b"}, "write it as %40"),
    ({"url": "redis://h:1?key_prefix=a%40b"}, "key_prefix must not contain '@'"),
    ({"startup_nodes": "redis://:hunter2@h:6379"}, "an entry holds '@' or '/'"),
    ({"key_prefix": "t\udcff"}, "key_prefix holds a character UTF-8 cannot encode"),
    ({"host": "h", "password": "hunter2\udcff"}, "password holds a character UTF-8 cannot encode"),
])
def test_conflicts_and_bad_values_are_refused_saying_why(given: dict, message: str, clean_env) -> None:
    with pytest.raises(InvalidInputError, match=message) as info:
        RespSettings.from_adapter_params(given, lmcache_evicts=False)
    assert "hunter2" not in str(info.value)


@pytest.mark.parametrize("ttl", [0, -1, 1.5, float("nan"), float("inf"), -float("inf"), 10**30, 2**64,
                                 100 * 365 * 24 * 3600 + 1, True, "1e3", "-5", "0x10", " "])
def test_a_bad_ttl_is_refused_at_construction_from_every_source(ttl: object, clean_env) -> None:
    """From a keyword, the URL's query, LMCache's MP JSON (ours, and the valkey adapter's), the
    non-MP YAML, and a store or client being built (refused before it connects: nothing listens
    on port 1). The environment carries no ttl_seconds (settings.ENV_VARS holds connection
    settings and secrets only): a variable of that name is not read."""
    url = "redis://127.0.0.1:1"
    plugin = "remote_storage_plugin.resp."
    yaml = types.SimpleNamespace(remote_storage_plugins=["resp"], extra_config={
        plugin + "module_path": "lmcache_resp.lmcache.non_mp", plugin + "class_name": "RespRemoteConnector",
        plugin + "url": url, plugin + "ttl_seconds": ttl})
    sources = {
        "keyword": lambda: RespSettings.resolve(url, ttl_seconds=ttl),
        "url": lambda: RespSettings.resolve(f"{url}?ttl_seconds={urllib.parse.quote(str(ttl))}"),
        "json": lambda: RespSettings.from_lmcache({"type": "native_plugin", "module_path": "lmcache_resp.lmcache.mp",
                                                   "class_name": "RespConnector",
                                                   "adapter_params": {"url": url, "ttl_seconds": ttl}}),
        "valkey json": lambda: RespSettings.from_lmcache({"type": "valkey", "startup_nodes": "127.0.0.1:1",
                                                          "ttl_seconds": ttl}),
        "yaml": lambda: non_mp.settings_from_lmcache_config(yaml),
        "store": lambda: PagedRespStore(url, ttl_seconds=ttl, page_size=4096, num_pages=1),
        "client": lambda: RedisClient("127.0.0.1", 1, ttl_seconds=ttl),
    }
    for source, build in sources.items():
        with pytest.raises(InvalidInputError, match=r"ttl_seconds must be a whole number of seconds in 1\.\.3153600000 "
                           r"\(or None: no expiry\), got "):
            build()
    assert RespSettings.resolve(url, env={"LMCACHE_RESP_TTL_SECONDS": str(ttl)}).ttl_seconds is None
    assert RespSettings.resolve(url, ttl_seconds=100 * 365 * 24 * 3600).ttl_seconds == 100 * 365 * 24 * 3600


def test_lmcache_s_own_capacity_beside_a_ttl_is_refused(clean_env) -> None:
    with pytest.raises(InvalidInputError, match="two owners of eviction"):
        RespSettings.from_lmcache({"type": "native_plugin", "module_path": "lmcache_resp.lmcache.mp",
                                   "class_name": "RespConnector", "max_capacity_gb": 10,
                                   "adapter_params": {"host": "h", "ttl_seconds": 60}})
