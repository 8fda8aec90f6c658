"""Namespaces shared with LMCache's own ``valkey`` L2 adapter (valkey_l2_adapter.py, on
valkey-glide-sync): with the same ``key_prefix`` one stores and the other loads every byte, in
both directions; another prefix sees nothing and its deletes and LMCache's eviction through it
never touch the first. Both adapters are built by LMCache's own parser and factory from
configs that differ only in ``type``/``module_path``/``class_name``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from lmc_helpers import RedisServer, pattern
from test_a_mp_l2_adapter import load, lookup, memory_obj, object_key, parse, store, wire_key

from lmcache.v1.distributed.l2_adapters import create_l2_adapter
from lmcache_resp_testing.servers import redis_py

SIZES = [4096, 100_000, 1 << 20, 3, 77_777]


def params(port: int, prefix: str) -> dict[str, Any]:
    """The valkey adapter's fields, as a user writes them for either adapter."""
    return {"startup_nodes": f"127.0.0.1:{port}", "key_prefix": prefix, "num_workers": 2, "request_timeout": 5}


def valkey_adapter(port: int, prefix: str) -> Any:
    return create_l2_adapter(parse(json.dumps({"type": "valkey", **params(port, prefix)})))


def our_adapter(port: int, prefix: str) -> Any:
    document = {"type": "native_plugin", "module_path": "lmcache_resp.lmcache.mp", "class_name": "RespConnector",
                "adapter_params": params(port, prefix)}
    return create_l2_adapter(parse(json.dumps(document)))


@pytest.mark.parametrize("writer_kind", ["valkey", "ours"])
def test_one_adapter_stores_and_the_other_loads_every_byte_in_the_same_namespace(
    redis_server: RedisServer, writer_kind: str
) -> None:
    port = redis_server.port
    make = {"valkey": valkey_adapter, "ours": our_adapter}
    reader_kind = "ours" if writer_kind == "valkey" else "valkey"
    writer, reader = make[writer_kind](port, "tenantA"), make[reader_kind](port, "tenantA")
    stranger = make[reader_kind](port, "tenantB")
    try:
        keys = [object_key(i, salt="s1" if i == 4 else "") for i in range(len(SIZES))]
        payloads = [pattern(size, 40 + i) for i, size in enumerate(SIZES)]
        store(writer, keys, [memory_obj(p) for p in payloads])
        server = redis_py(redis_server)
        # The wire format both adapters share: <prefix>@<LMCache's key>, the raw bytes as the value.
        assert sorted(server.keys("*")) == sorted(f"tenantA@{wire_key(k)}".encode() for k in keys)
        for key, payload in zip(keys, payloads, strict=True):
            assert server.get(f"tenantA@{wire_key(key)}") == payload

        assert lookup(reader, keys + [object_key(999)]) == [True] * len(keys) + [False]
        targets = [memory_obj(size) for size in SIZES]
        assert load(reader, keys, targets) == [True] * len(keys)
        assert [bytes(t.byte_array) for t in targets] == payloads

        # Another namespace sees nothing, loads nothing, and its deletes touch nothing.
        assert lookup(stranger, keys) == [False] * len(keys)
        untouched = [memory_obj(size) for size in SIZES]
        assert load(stranger, keys, untouched) == [False] * len(keys)
        assert all(bytes(t.byte_array) == b"\xee" * len(t.byte_array) for t in untouched)
        stranger.delete(keys)
        assert [server.get(f"tenantA@{wire_key(k)}") for k in keys] == payloads
    finally:
        for adapter in (writer, reader, stranger):
            adapter.close()


def test_lmcaches_eviction_through_our_adapter_stays_in_its_namespace(redis_server: RedisServer) -> None:
    """LMCache's eviction deletes through the adapter's delete: with a prefix, only that
    prefix's keys go, and the other tenant's (written by the valkey adapter) stay."""
    port = redis_server.port
    theirs, ours = valkey_adapter(port, "tenantB"), our_adapter(port, "tenantA")
    try:
        keys = [object_key(i) for i in range(4)]
        store(theirs, keys, [memory_obj(pattern(1000, i)) for i in range(4)])
        store(ours, keys, [memory_obj(pattern(1000, 10 + i)) for i in range(4)])
        ours.delete(keys)
        server = redis_py(redis_server)
        assert [server.exists(f"tenantA@{wire_key(k)}") for k in keys] == [0] * 4
        assert [server.get(f"tenantB@{wire_key(k)}") for k in keys] == [pattern(1000, i) for i in range(4)]
        assert lookup(theirs, keys) == [True] * 4
    finally:
        theirs.close()
        ours.close()


def test_a_ttl_from_either_adapter_reaches_the_server(redis_server: RedisServer) -> None:
    port = redis_server.port
    documents = {
        "valkey": {"type": "valkey", **params(port, "ttl"), "ttl_seconds": 300},
        "ours": {"type": "native_plugin", "module_path": "lmcache_resp.lmcache.mp", "class_name": "RespConnector",
                 "adapter_params": {**params(port, "ttl"), "ttl_seconds": 300}},
    }
    server = redis_py(redis_server)
    for i, (kind, document) in enumerate(documents.items()):
        adapter = create_l2_adapter(parse(json.dumps(document)))
        try:
            key = object_key(500 + i)
            store(adapter, [key], [memory_obj(pattern(2048, i))])
            assert 0 < server.pttl(f"ttl@{wire_key(key)}") <= 300_000, kind
        finally:
            adapter.close()
