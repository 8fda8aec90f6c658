"""(a) MP mode: examples/lmcache/mp-l2-adapter.json through LMCache's own code (0.5.6 or 0.5.7rc2).

The JSON goes through LMCache's --l2-adapter parser (``parse_args_to_l2_adapters_config``) and
``create_l2_adapter``, which imports lmcache_resp, builds ``RespConnector(**adapter_params)``
and wraps it in LMCache's ``NativeConnectorL2Adapter``. Capacity: LMCache reads the top-level
``max_capacity_gb``/``eviction`` and evicts through ``submit_batch_delete``; the connector's own
tracking stays off (one owner). The last test starts the real ``lmcache server``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import logging
import os
import select
import subprocess
import sys
import time
from typing import Any

import pytest
import torch

from lmc_helpers import (
    ADAPTER_CREATED,
    RedisServer,
    bridge_example,
    free_port,
    load_mp_example,
    pattern,
    stop_process_group,
)

from lmcache.v1.distributed.api import MemoryLayoutDesc, ObjectKey
from lmcache.v1.distributed.l2_adapters import create_l2_adapter
from lmcache.v1.distributed.l2_adapters.config import parse_args_to_l2_adapters_config
from lmcache.v1.distributed.l2_adapters.native_connector_l2_adapter import NativeConnectorL2Adapter
from lmcache.v1.distributed.storage_controllers.eviction_controller import (
    L2AdapterEvictionState,
    L2EvictionController,
)
from lmcache.v1.memory_management import MemoryFormat, MemoryObjMetadata, TensorMemoryObj
from lmcache.v1.platform import consume_fd

from lmcache_resp import RespConnector, RespSettings
from lmcache_resp_testing.servers import redis_py

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
NO_LAYOUT = {0: MemoryLayoutDesc(shapes=[], dtypes=[])}


def memory_obj(data: bytes | int) -> TensorMemoryObj:
    """A KV chunk as LMCache's L1 hands it to L2 adapters: a TensorMemoryObj whose byte_array
    is a view of its tensor. ``data``: the bytes, or a size (then filled with 0xEE)."""
    raw = (
        torch.frombuffer(bytearray(data), dtype=torch.uint8)
        if isinstance(data, bytes)
        else torch.full((data,), 0xEE, dtype=torch.uint8)
    )
    meta = MemoryObjMetadata(
        shape=torch.Size([raw.numel()]), dtype=torch.uint8, address=0, phy_size=raw.numel(),
        fmt=MemoryFormat.KV_2LTD, ref_count=1,
    )
    return TensorMemoryObj(raw, meta, parent_allocator=None)


def object_key(i: int, salt: str = "") -> ObjectKey:
    return ObjectKey(chunk_hash=ObjectKey.IntHash2Bytes(i), model_name=MODEL, kv_rank=3, cache_salt=salt)


def wire_key(key: ObjectKey) -> str:
    """The key LMCache's NativeConnectorL2Adapter hands the connector (documented format)."""
    base = f"{key.model_name}@{key.kv_rank:08x}@{key.object_group_id:x}@{key.chunk_hash.hex()}"
    return f"{base}@{key.cache_salt}" if key.cache_salt else base


def wait(fd: int, timeout: float = 30) -> None:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    assert poller.poll(timeout * 1000), f"no completion within {timeout} s"
    try:
        consume_fd(fd)
    except BlockingIOError:
        pass


def parse(text: str) -> Any:
    """LMCache's own --l2-adapter parsing (what `lmcache server` does with the argument)."""
    configs = parse_args_to_l2_adapters_config(argparse.Namespace(l2_adapter=[text]))
    assert len(configs.adapters) == 1
    return configs.adapters[0]


def store(adapter: Any, keys: list[ObjectKey], objs: list[TensorMemoryObj]) -> None:
    task = adapter.submit_store_task(keys, objs)
    deadline = time.monotonic() + 30
    done: dict[int, Any] = {}
    while task not in done:
        wait(adapter.get_store_event_fd(), max(0.1, deadline - time.monotonic()))
        done.update(adapter.pop_completed_store_tasks())
    assert done[task].is_successful()


def lookup(adapter: Any, keys: list[ObjectKey]) -> list[bool]:
    task = adapter.submit_lookup_and_lock_task(keys, NO_LAYOUT)
    wait(adapter.get_lookup_and_lock_event_fd())
    bitmap = adapter.query_lookup_and_lock_result(task)
    adapter.submit_unlock(keys)
    return [bitmap.test(i) for i in range(len(keys))]


def load(adapter: Any, keys: list[ObjectKey], objs: list[TensorMemoryObj]) -> list[bool]:
    task = adapter.submit_load_task(keys, objs)
    wait(adapter.get_load_event_fd())
    bitmap = adapter.query_load_result(task)
    return [bitmap.test(i) for i in range(len(keys))]


@pytest.fixture
def mp_adapter(redis_server: RedisServer) -> Any:
    text, _ = load_mp_example(redis_server.port)
    adapter = create_l2_adapter(parse(text))
    yield adapter
    adapter.close()


def test_the_example_goes_through_lmcaches_parser_and_factory(redis_server: RedisServer) -> None:
    text, document = load_mp_example(redis_server.port)
    config = parse(text)
    assert type(config).__name__ == "NativePluginL2AdapterConfig"
    assert (config.module_path, config.class_name) == ("lmcache_resp.lmcache.mp", "RespConnector")
    assert config.adapter_params == {"host": "127.0.0.1", "port": redis_server.port, "num_workers": 8, "timeout": 2}
    # LMCache reads capacity and eviction at the top level, beside adapter_params.
    assert config.max_capacity_gb == document["max_capacity_gb"] == 40
    assert config.eviction_config is not None
    assert (config.eviction_config.eviction_policy, config.eviction_config.trigger_watermark,
            config.eviction_config.eviction_ratio) == ("LRU", 0.8, 0.2)
    adapter = create_l2_adapter(config)
    try:
        assert isinstance(adapter, NativeConnectorL2Adapter)
        assert adapter.report_status() == {"is_healthy": True, "type": "RespConnector"}
        assert adapter.supports_global_eviction
        assert adapter.get_usage().total_capacity_bytes == 40 * 1024**3  # LMCache: GiB
        # The connector's own tracking is off: LMCache is the one owner of capacity here.
        assert isinstance(adapter._client, RespConnector)  # noqa: SLF001 - what LMCache wrapped
        assert adapter._client.capacity_stats is None  # noqa: SLF001
    finally:
        adapter.close()


def test_store_lookup_load_verifies_every_byte(mp_adapter: Any, redis_server: RedisServer) -> None:
    sizes = [16 << 10, 1 << 20, 100_000, 4096, 3, 256 << 10, 1 << 20, 77_777]
    keys = [object_key(i) for i in range(len(sizes) - 1)] + [object_key(99, salt="tenant-7")]
    payloads = [pattern(size, seed) for seed, size in enumerate(sizes)]
    store(mp_adapter, keys, [memory_obj(p) for p in payloads])

    server = redis_py(redis_server)
    for key, payload in zip(keys, payloads, strict=True):
        assert server.get(wire_key(key)) == payload  # raw KV bytes under LMCache's key, no header
    missing = [object_key(1000), object_key(1001)]
    assert lookup(mp_adapter, keys + missing) == [True] * len(keys) + [False, False]

    targets = [memory_obj(size) for size in sizes] + [memory_obj(4096), memory_obj(4096)]
    bits = load(mp_adapter, keys + missing, targets)
    assert bits == [True] * len(keys) + [False, False]
    for target, payload in zip(targets, payloads, strict=False):
        assert bytes(target.byte_array) == payload
    for target in targets[len(keys):]:
        assert bytes(target.byte_array) == b"\xee" * 4096  # a miss leaves the buffer untouched
    assert mp_adapter.get_usage().total_bytes_used == sum(sizes)


def test_a_longer_stored_value_is_a_miss(mp_adapter: Any, redis_server: RedisServer) -> None:
    key = object_key(5)
    redis_py(redis_server).set(wire_key(key), pattern(4097, 1))
    target = memory_obj(4096)
    assert load(mp_adapter, [key], [target]) == [False]
    assert bytes(target.byte_array) == b"\xee" * 4096


def test_a_shorter_stored_value_is_a_miss(mp_adapter: Any, redis_server: RedisServer) -> None:
    key = object_key(6)
    redis_py(redis_server).set(wire_key(key), pattern(4095, 2))
    target = memory_obj(4096)
    assert load(mp_adapter, [key], [target]) == [False]
    assert bytes(target.byte_array) == b"\xee" * 4096


def test_lmcache_owns_eviction_and_deletes_through_the_connector(redis_server: RedisServer) -> None:
    """The example's arrangement with a tiny capacity: LMCache's L2EvictionController (as its
    StorageManager wires it, storage_manager.py:220-236) evicts LRU keys with
    submit_batch_delete; the connector tracks nothing itself."""
    _, document = load_mp_example(redis_server.port)
    chunk = 64 << 10
    document["max_capacity_gb"] = 8 * chunk / 1024**3  # room for 8 chunks (LMCache: GiB)
    config = parse(json.dumps(document))
    adapter = create_l2_adapter(config)
    controller = L2EvictionController([L2AdapterEvictionState(0, adapter, config.eviction_config)])
    controller.start()
    try:
        keys = [object_key(i) for i in range(10)]
        for i, key in enumerate(keys):  # one batch each: LRU order = store order
            store(adapter, [key], [memory_obj(pattern(chunk, i))])
        server = redis_py(redis_server)
        deadline = time.monotonic() + 30
        while adapter.get_usage().usage_fraction >= 0.8 and time.monotonic() < deadline:
            time.sleep(0.1)
        usage = adapter.get_usage()
        assert 0 <= usage.usage_fraction < 0.8
        present = [bool(server.exists(wire_key(k))) for k in keys]
        # LMCache's figure is what the server holds; the oldest keys went first.
        assert usage.total_bytes_used == sum(present) * chunk
        assert present == sorted(present), present
        assert not present[0] and present[-1]
        assert adapter._client.capacity_stats is None  # noqa: SLF001 - one owner: LMCache
    finally:
        controller.stop()
        adapter.close()


def test_adapter_delete_removes_the_keys(mp_adapter: Any, redis_server: RedisServer) -> None:
    keys = [object_key(i) for i in range(4)]
    store(mp_adapter, keys, [memory_obj(pattern(1000, i)) for i in range(4)])
    mp_adapter.delete(keys[:3])
    server = redis_py(redis_server)
    assert [bool(server.exists(wire_key(k))) for k in keys] == [False, False, False, True]
    assert mp_adapter.get_usage().total_bytes_used == 1000


def test_our_settings_parser_accepts_the_example(redis_server: RedisServer) -> None:
    text, _ = load_mp_example(redis_server.port)
    settings = RespSettings.from_lmcache(text)
    assert (settings.host, settings.port, settings.num_workers, settings.timeout) == ("127.0.0.1", redis_server.port, 8, 2)
    assert settings.max_capacity_gb == 0  # capacity is LMCache's in MP mode


def test_affinity_tag_is_lmcache_0_5_6s_and_our_reader_takes_either_versions_document(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    """LMCache 0.5.6 takes a top-level affinity_tag; 0.5.7 refuses the document holding it. The
    example has none, so both read it (above); ours reads both versions' documents, the 0.5.6
    one with a warning that 0.5.7 refuses it (docs/lmcache.md, "LMCache 0.5.6 and 0.5.7")."""
    _, document = load_mp_example(redis_server.port)
    tagged = json.dumps({**document, "affinity_tag": "_default"})
    if importlib.metadata.version("lmcache").startswith("0.5.6"):
        assert parse(tagged).affinity_tag == "_default"
    else:
        with pytest.raises(ValueError, match="affinity_tag was removed"):
            parse(tagged)
    caplog.set_level(logging.WARNING, logger="lmcache_resp")
    settings = RespSettings.from_lmcache(tagged)
    assert (settings.host, settings.port) == ("127.0.0.1", redis_server.port)
    assert "LMCache 0.5.7 refuses it" in caplog.text


def test_max_capacity_gb_has_lmcaches_unit() -> None:
    # Where the connector owns capacity (non-MP), one figure means what it means to LMCache.
    assert RespSettings.from_adapter_params({"host": "h", "max_capacity_gb": 1}, lmcache_evicts=False).capacity_bytes == 1024**3


def test_the_lmcache_server_loads_the_example(redis_server: RedisServer, tmp_path: Any) -> None:
    """`lmcache server --l2-adapter <example>` (LMCache's MP server, on CPU) builds our
    connector, and its I/O workers connect to the server."""
    text, _ = load_mp_example(redis_server.port)
    ports = [str(free_port()) for _ in range(3)]
    log_path = tmp_path / "server.log"
    env = {**os.environ, "LMCACHE_TRACK_USAGE": "false", "LMCACHE_DISABLE_BANNER": "1"}
    command = [
        sys.executable, "-m", "lmcache.cli.main", "server", "--l1-size-gb", "0.2", "--eviction-policy", "LRU",
        "--chunk-size", "16", "--port", ports[0], "--http-port", ports[1], "--prometheus-port", ports[2],
        "--supported-transfer-mode", "engine_driven", "--l2-adapter", text,
    ]
    with open(log_path, "wb") as log:
        # cwd: not the repository, whose source tree would shadow the installed lmcache_resp
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path,
                                   start_new_session=True)
    try:
        wanted = ADAPTER_CREATED
        deadline = time.monotonic() + 180
        while wanted not in log_path.read_text(errors="replace"):
            assert process.poll() is None, log_path.read_text(errors="replace")[-4000:]
            assert time.monotonic() < deadline, "the server did not build the adapter within 180 s"
            time.sleep(0.5)
        clients = redis_py(redis_server).client_list()
        assert len(clients) >= 1 + 8  # ours (redis-py) + the connector's 8 I/O workers
    finally:
        stop_process_group(process)


def test_the_mp_adapter_through_a_bridge_verifies_every_byte(redis_server: RedisServer, tmp_path: Any) -> None:
    """examples/bridge/mp-l2-adapter-bridge.json through LMCache's parser and factory: the
    connector attaches to a bridge process (which alone holds the connection), and LMCache's
    store/lookup/load move every byte through the bridge's pages."""
    with bridge_example(redis_server.port, tmp_path, num_pages=32) as document:
        adapter = create_l2_adapter(parse(json.dumps(document)))
        try:
            assert isinstance(adapter, NativeConnectorL2Adapter)
            assert adapter.report_status() == {"is_healthy": True, "type": "RespConnector"}
            sizes = [1 << 20, 4096, 100_000, 3]
            keys = [object_key(200 + i) for i in range(len(sizes))]
            payloads = [pattern(size, 50 + i) for i, size in enumerate(sizes)]
            store(adapter, keys, [memory_obj(p) for p in payloads])
            server = redis_py(redis_server)
            assert [server.get(wire_key(k)) for k in keys] == payloads
            missing = [object_key(999)]
            assert lookup(adapter, keys + missing) == [True] * len(keys) + [False]
            targets = [memory_obj(size) for size in sizes] + [memory_obj(4096)]
            assert load(adapter, keys + missing, targets) == [True] * len(keys) + [False]
            assert [bytes(t.byte_array) for t in targets[:-1]] == payloads
            assert bytes(targets[-1].byte_array) == b"\xee" * 4096
            adapter.delete(keys[:2])
            assert [bool(server.exists(wire_key(k))) for k in keys] == [False, False, True, True]
        finally:
            adapter.close()
