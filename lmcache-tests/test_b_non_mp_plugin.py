"""(b) Non-MP mode: examples/lmcache/non-mp.yaml through LMCache's own code (0.5.6 or 0.5.7rc2).

LMCache reads the YAML (``LMCacheEngineConfig.from_file``), builds its storage backends
(``CreateStorageBackends``: one RemoteBackend per ``remote_storage_plugins`` entry), and its
``ConnectorManager`` loads ``lmcache_resp.lmcache.non_mp.RespRemoteConnector`` through
``DynamicConnectorAdapter``. Real KV chunks (bf16 tensors from LMCache's allocator) go through
RemoteBackend's put/get paths and come back byte for byte.
"""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from lmc_helpers import RedisServer, load_non_mp_example, run_on

from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend import CreateStorageBackends
from lmcache.v1.storage_backend.connector import CreateConnector

from lmcache_resp import InvalidInputError, RespSettings
from lmcache_resp.lmcache.non_mp import RespRemoteConnector, settings_from_lmcache_config
from lmcache_resp_testing.servers import redis_py

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
KV_SHAPE = (4, 2, 256, 2, 64)  # layers, K/V, chunk tokens, heads, head size: 512 KiB per bf16 chunk
CHUNK_BYTES = 2 * 4 * 256 * 2 * 64 * 2


def metadata() -> LMCacheMetadata:
    return LMCacheMetadata(
        model_name=MODEL, world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
        kv_dtype=torch.bfloat16, kv_shape=KV_SHAPE, use_mla=False, chunk_size=256,
    )


def cache_key(i: int) -> CacheEngineKey:
    return CacheEngineKey(model_name=MODEL, world_size=1, worker_id=0, chunk_hash=1000 + i, dtype=torch.bfloat16)


class Engine:
    """What LMCacheEngine builds for non-MP storage, from the example YAML."""

    def __init__(self, config: LMCacheEngineConfig, loop: asyncio.AbstractEventLoop) -> None:
        self.config = config
        self.loop = loop
        self.backends = CreateStorageBackends(config, metadata(), loop, dst_device="cpu")
        self.local = self.backends["LocalCPUBackend"]
        self.owned: list[Any] = []  # memory objects this test holds a reference on

    def own(self, obj: Any) -> Any:
        if obj is not None:
            self.owned.append(obj)
        return obj

    @property
    def remote(self) -> Any:
        return self.backends["RemoteBackend-resp"]

    def chunk(self, seed: int) -> Any:
        """A full KV chunk from LMCache's allocator, filled with bf16 values (ref count 1)."""
        connector = self.remote.connection.getWrappedConnector()
        obj = self.local.allocate(connector.meta_shapes, connector.meta_dtypes, busy_loop=False)
        assert obj is not None
        generator = torch.Generator().manual_seed(seed)
        obj.tensor.copy_(torch.randn(obj.tensor.shape, generator=generator).to(torch.bfloat16))
        return self.own(obj)

    def wait_puts(self, chunks: list[Any], timeout: float = 30) -> None:
        """Until every put has given back its references (LMCache's batched put path leaves
        no other trace: it does not record its keys in RemoteBackend.put_tasks)."""
        deadline = time.monotonic() + timeout
        while any(c.get_ref_count() != 1 for c in chunks):
            assert time.monotonic() < deadline, "puts did not finish (or leaked a reference)"
            time.sleep(0.01)

    def close(self) -> None:
        for obj in self.owned:
            obj.ref_count_down()
        for backend in reversed(self.backends.values()):
            backend.close()


@pytest.fixture
def engine(redis_server: RedisServer, lmcache_loop: asyncio.AbstractEventLoop, tmp_path: Path) -> Iterator[Engine]:
    config = LMCacheEngineConfig.from_file(str(load_non_mp_example(redis_server.port, tmp_path)))
    built = Engine(config, lmcache_loop)
    yield built
    built.close()


def test_the_example_builds_exactly_one_remote_backend_over_our_connector(engine: Engine) -> None:
    assert [name for name in engine.backends if name.startswith("RemoteBackend")] == ["RemoteBackend-resp"]
    connector = engine.remote.connection.getWrappedConnector()  # LMCache wraps it in its instrumentation
    assert isinstance(connector, RespRemoteConnector)
    assert connector.settings.endpoint.endswith(f":{engine.config.extra_config['remote_storage_plugin.resp.port']}")
    assert connector.settings.num_workers == 8
    assert connector.capacity_stats is None  # the example leaves capacity off
    assert connector.full_chunk_size_bytes == CHUNK_BYTES


def test_chunks_round_trip_byte_for_byte(engine: Engine, redis_server: RedisServer) -> None:
    keys = [cache_key(i) for i in range(6)]
    chunks = [engine.chunk(i) for i in range(6)]
    expected = [bytes(c.byte_array) for c in chunks]
    assert all(len(e) == CHUNK_BYTES for e in expected)

    engine.remote.batched_submit_put_task(keys[:4], chunks[:4])  # batched_put
    engine.remote.submit_put_task(keys[4], chunks[4])  # put
    engine.wait_puts(chunks[:5])  # LMCache's serializer and our I/O give back their references

    server = redis_py(redis_server)
    for key, data in zip(keys[:5], expected, strict=False):
        assert server.get(key.to_string()) == data  # raw KV bytes (remote_serde: naive), no header

    assert engine.remote.contains(keys[0]) and not engine.remote.contains(keys[5])
    assert engine.remote.batched_contains(keys) == 5  # prefix of hits
    assert engine.remote.batched_contains([keys[5], *keys[:5]]) == 0

    one = engine.own(engine.remote.get_blocking(keys[4]))
    assert bytes(one.byte_array) == expected[4]
    got = [engine.own(g) for g in engine.remote.batched_get_blocking(keys)]
    assert [bytes(g.byte_array) for g in got[:5]] == expected[:5]
    assert got[5] is None
    assert torch.equal(got[2].tensor, chunks[2].tensor)


def test_async_lookup_and_prefetch_paths(engine: Engine) -> None:
    keys = [cache_key(i) for i in range(4)]
    chunks = [engine.chunk(10 + i) for i in range(3)]
    engine.remote.batched_submit_put_task(keys[:3], chunks)
    engine.wait_puts(chunks)
    loop = engine.loop
    assert run_on(loop, engine.remote.batched_async_contains("lookup-1", keys)) == 3
    objs = run_on(loop, engine.remote.batched_get_non_blocking("lookup-1", [keys[0], keys[1], keys[3], keys[2]]))
    for obj in objs:
        engine.own(obj)
    assert [bytes(o.byte_array) for o in objs] == [bytes(chunks[0].byte_array), bytes(chunks[1].byte_array)]


def test_remove_deletes_the_key(engine: Engine, redis_server: RedisServer) -> None:
    key = cache_key(0)
    chunk = engine.chunk(0)
    engine.remote.submit_put_task(key, chunk)
    engine.wait_puts([chunk])
    assert engine.remote.remove(key) is True
    assert not redis_py(redis_server).exists(key.to_string())
    assert engine.remote.get_blocking(key) is None


def test_a_longer_stored_value_is_a_miss(engine: Engine, redis_server: RedisServer) -> None:
    key = cache_key(1)
    redis_py(redis_server).set(key.to_string(), b"\x01" * (CHUNK_BYTES + 1))
    assert engine.remote.get_blocking(key) is None


def test_a_shorter_stored_value_is_a_miss(engine: Engine, redis_server: RedisServer) -> None:
    key = cache_key(2)
    redis_py(redis_server).set(key.to_string(), b"\x01" * (CHUNK_BYTES - 2))
    assert engine.own(engine.remote.get_blocking(key)) is None


def test_the_connector_owns_capacity_in_non_mp_mode(
    redis_server: RedisServer, lmcache_loop: Any, tmp_path: Path
) -> None:
    """LMCache has no eviction for remote backends in non-MP mode: with max_capacity_gb in the
    plugin's keys, the connector tracks what it stored and evicts LRU keys itself."""
    config = LMCacheEngineConfig.from_file(str(load_non_mp_example(redis_server.port, tmp_path)))
    config.extra_config["remote_storage_plugin.resp.max_capacity_gb"] = 4 * CHUNK_BYTES / 1e9  # GB = 1e9 B
    engine = Engine(config, lmcache_loop)
    try:
        connector = engine.remote.connection.getWrappedConnector()
        keys = [cache_key(i) for i in range(8)]
        for i, key in enumerate(keys):
            chunk = engine.chunk(i)
            engine.remote.submit_put_task(key, chunk)
            engine.wait_puts([chunk])
        server = redis_py(redis_server)
        deadline = time.monotonic() + 30
        while (stats := connector.capacity_stats)["stored_bytes"] > 0.8 * stats["capacity_bytes"]:
            assert time.monotonic() < deadline, stats
            time.sleep(0.05)
        assert stats["evictions"] > 0
        assert server.dbsize() * CHUNK_BYTES == stats["stored_bytes"]
        assert not server.exists(keys[0].to_string()) and server.exists(keys[-1].to_string())
    finally:
        engine.close()


def test_create_connector_with_the_plugin_url(redis_server: RedisServer, lmcache_loop: Any, tmp_path: Path) -> None:
    """LMCache's CreateConnector('plugin://resp', ...) is what RemoteBackend calls."""
    config = LMCacheEngineConfig.from_file(str(load_non_mp_example(redis_server.port, tmp_path)))
    backends = CreateStorageBackends(config, metadata(), lmcache_loop, dst_device="cpu",
                                     skip_backends={"RemoteBackend"})
    local = backends["LocalCPUBackend"]
    connector = CreateConnector("plugin://resp", lmcache_loop, local, config, metadata(), plugin_name="resp")
    try:
        inner = connector.getWrappedConnector()
        assert isinstance(inner, RespRemoteConnector)
        key = cache_key(7)
        obj = local.allocate(inner.meta_shapes, inner.meta_dtypes, busy_loop=False)
        obj.tensor.fill_(1.5)
        obj.ref_count_up()  # what LMCache's serializer does before a put
        run_on(lmcache_loop, connector.put(key, obj))
        assert obj.get_ref_count() == 1
        assert run_on(lmcache_loop, connector.exists(key)) is True
        back = run_on(lmcache_loop, connector.get(key))
        assert bytes(back.byte_array) == bytes(obj.byte_array)
        back.ref_count_down()
        obj.ref_count_down()
        assert run_on(lmcache_loop, connector.get(cache_key(8))) is None
    finally:
        run_on(lmcache_loop, connector.close())
        for backend in backends.values():
            backend.close()


def test_credentials_come_from_the_environment(
    secure_server: RedisServer, lmcache_loop: Any, tmp_path: Path, clean_resp_env: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert secure_server.password is not None
    clean_resp_env.setenv("LMCACHE_RESP_PASSWORD", secure_server.password)
    caplog.set_level(logging.DEBUG)
    config = LMCacheEngineConfig.from_file(str(load_non_mp_example(secure_server.port, tmp_path)))
    engine = Engine(config, lmcache_loop)
    try:
        key = cache_key(3)
        chunk = engine.chunk(3)
        engine.remote.submit_put_task(key, chunk)
        engine.wait_puts([chunk])
        assert bytes(engine.own(engine.remote.get_blocking(key)).byte_array) == bytes(chunk.byte_array)
    finally:
        engine.close()
    assert secure_server.password not in caplog.text


def test_settings_come_from_plugin_scoped_keys(tmp_path: Path) -> None:
    config = LMCacheEngineConfig.from_defaults(
        remote_storage_plugins=["resp"],
        extra_config={
            "remote_storage_plugin.resp.module_path": "lmcache_resp.lmcache.non_mp",
            "remote_storage_plugin.resp.class_name": "RespRemoteConnector",
            "remote_storage_plugin.resp.url": "redis://10.1.2.3:7000/2",
            "remote_storage_plugin.resp.num_workers": 3,
            "remote_storage_plugin.resp.max_capacity_gb": 2,
            "remote_storage_plugin.resp.eviction": {"eviction_policy": "LRU", "trigger_watermark": 0.9},
            "resp_num_threads": 99,  # LMCache's resp:// key: not ours
        },
    )
    settings = settings_from_lmcache_config(config)
    assert isinstance(settings, RespSettings)
    assert (settings.host, settings.port, settings.db, settings.num_workers) == ("10.1.2.3", 7000, 2, 3)
    assert (settings.max_capacity_gb, settings.eviction.trigger_watermark) == (2, 0.9)


@pytest.mark.parametrize(
    ("extra", "plugins", "fragment"),
    [
        ({"remote_storage_plugin.resp.prot": 1}, ["resp"], "prot"),
        ({}, [], "no remote_storage_plugins entry"),
        ({"remote_storage_plugin.b.module_path": "lmcache_resp.lmcache.non_mp",
          "remote_storage_plugin.b.class_name": "RespRemoteConnector"}, ["resp", "b"], "cannot tell them apart"),
    ],
)
def test_configuration_errors_name_the_problem(extra: dict[str, Any], plugins: list[str], fragment: str) -> None:
    base = {"remote_storage_plugin.resp.module_path": "lmcache_resp.lmcache.non_mp",
            "remote_storage_plugin.resp.class_name": "RespRemoteConnector"}
    config = LMCacheEngineConfig.from_defaults(
        remote_storage_plugins=plugins, extra_config={**(base if plugins else {}), **extra}
    )
    with pytest.raises(InvalidInputError, match=fragment):
        settings_from_lmcache_config(config)


def test_unfull_chunks_are_refused(redis_server: RedisServer, lmcache_loop: Any, tmp_path: Path) -> None:
    config = LMCacheEngineConfig.from_file(str(load_non_mp_example(redis_server.port, tmp_path)))
    config.save_unfull_chunk = True
    with pytest.raises(InvalidInputError, match="save_unfull_chunk"):
        RespRemoteConnector(loop=lmcache_loop, local_cpu_backend=None, config=config)


def test_importing_the_package_does_not_import_lmcache(tmp_path: Path) -> None:
    code = (
        "import sys, lmcache_resp, lmcache_resp.lmcache, lmcache_resp.lmcache.non_mp;"
        "assert not [m for m in sys.modules if m == 'lmcache' or m.startswith('lmcache.')], 'imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)  # the installed package
