"""Both LMCache modes against a real redis-server.

- non-MP: RespConnectorClient (ConnectorClientBase semantics) on asyncio, and its *_sync
  variants from other threads.
- MP: LMCache's ``native_plugin`` L2 adapter emulated as lmcache-native-connector.md describes
  it (LMCache itself is not installed here): import the module, look the class up, build it
  with ``**adapter_params`` from a pasted ``--l2-adapter`` JSON, check the methods, then a demux
  thread polls the eventfd level-triggered and drains while controller threads submit under
  a lock.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
import os
import select
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from conftest import RedisServer, lmcache_pool, pattern

from lmcache_resp import ClosedError, InvalidInputError, RespConnector, RespSettings, _native
from lmcache_resp import ConnectorError, RespConnectorClient
from lmcache_resp_testing.servers import pause, redis_py, resume

T = TypeVar("T")



def run(make: Callable[[], Awaitable[T]], timeout: float = 30) -> T:
    async def bounded() -> T:
        return await asyncio.wait_for(make(), timeout)

    return asyncio.run(bounded())



def url_of(server: RedisServer, **query: object) -> str:
    params = "&".join(f"{k}={v}" for k, v in {"num_workers": 2, **query}.items())
    return f"resp://127.0.0.1:{server.port}?{params}"


# -- non-MP: RespConnectorClient ----------------------------------------------------------------


def test_non_mp_round_trip_hits_misses_and_singles(redis_server: RedisServer, clean_env: pytest.MonkeyPatch) -> None:
    sizes = [100, 64 * 1024, 1 << 20]
    data = [pattern(n, i) for i, n in enumerate(sizes)]
    keys = [f"Qwen/Qwen3-14B@{i:08x}@0@{'cd' * 32}" for i in range(3)]

    async def scenario() -> None:
        client = RespConnectorClient.from_settings(url_of(redis_server))
        _pool, bufs = lmcache_pool(sizes)
        for buf, d in zip(bufs, data):
            buf[:] = d
        assert await client.batch_set(keys, bufs) is None
        _pool2, outs = lmcache_pool([100, 100, 64 * 1024, 1 << 20])
        hits = await client.batch_get([keys[0], "absent", keys[1], keys[2]], outs)
        assert hits == [True, False, True, True]
        assert (bytes(outs[0]), bytes(outs[2]), bytes(outs[3])) == tuple(data)
        assert bytes(outs[1]) == bytes(100), "a miss leaves its buffer untouched"
        assert await client.batch_exists(keys + ["absent"]) == [True, True, True, False]
        assert await client.batched_exists(["absent"]) == [False]
        await client.set("single", memoryview(bytearray(b"s" * 10)))
        out = bytearray(10)
        assert await client.get("single", memoryview(out)) is True and out == b"s" * 10
        assert await client.get("nope", memoryview(out)) is False
        assert (await client.exists("single"), await client.exists("nope")) == (True, False)
        with pytest.raises(ValueError, match="2 keys but 1 buffers"):
            await client.batch_set(["a", "b"], [memoryview(bytearray(1))])
        client.close()
        with pytest.raises(ClosedError):
            await client.exists("single")

    run(scenario)
    assert redis_py(redis_server).get(keys[1]) == data[1]


def test_non_mp_sync_variants_from_other_threads(redis_server: RedisServer, clean_env: pytest.MonkeyPatch) -> None:
    def worker(client: RespConnectorClient, t: int) -> list[Any]:
        buf = memoryview(bytearray(pattern(4096, t)))
        client.batch_set_sync([f"sync:{t}"], [buf])
        client.set_sync(f"sync1:{t}", buf)
        out = memoryview(bytearray(4096))
        return [
            client.batch_get_sync([f"sync:{t}", "absent"], [out, memoryview(bytearray(8))]),
            bytes(out) == pattern(4096, t),
            client.get_sync(f"sync1:{t}", out),
            client.batch_exists_sync([f"sync:{t}", "absent"]),
            client.exists_sync("absent"),
        ]

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        client = RespConnectorClient(RespConnector(url=url_of(redis_server)), loop)
        results = await asyncio.gather(*(loop.run_in_executor(None, worker, client, t) for t in range(4)))
        assert results == [[[True, False], True, True, [True, False], False]] * 4
        with pytest.raises(RuntimeError, match="would block the event loop"):
            client.exists_sync("x")
        client.close()

    run(scenario)


def test_non_mp_built_on_a_loop_running_in_another_thread(redis_server: RedisServer, clean_env: pytest.MonkeyPatch) -> None:
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever)
    runner.start()
    try:
        client = RespConnectorClient.from_settings(url_of(redis_server), loop=loop)
        client.set_sync("far", memoryview(bytearray(b"f" * 32)))
        assert client.exists_sync("far") is True
        probe = asyncio.run_coroutine_threadsafe(client.exists("far"), loop)
        assert probe.result(timeout=10) is True
        client.close()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join()
        loop.close()


def test_non_mp_per_key_failure_is_a_false_bit_and_a_warning_without_the_password(
    secure_server: RedisServer, clean_env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    password = "s3cret-default-pw"
    settings = RespSettings.resolve(host="127.0.0.1", port=secure_server.port, password=password, num_workers=2)

    redis_py(secure_server).lpush("a-list", b"x")

    async def scenario() -> list[bool]:
        async with RespConnectorClient.from_settings(settings) as client:
            await client.batch_set(["shorter", "fits"], [memoryview(bytearray(1000)), memoryview(bytearray(4096))])
            _pool, outs = lmcache_pool([4096, 4096, 4096, 4096])
            return await client.batch_get(["a-list", "fits", "absent", "shorter"], outs)

    assert run(scenario) == [False, True, False, False]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'a-list'" in w and "WRONGTYPE" in w for w in warnings), warnings
    assert not any("'shorter'" in w or "'absent'" in w for w in warnings), "misses are not failures"
    assert password not in caplog.text


def test_non_mp_failed_batches_raise_for_set_and_give_false_bits_for_get(
    redis_server: RedisServer, clean_env: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        client = RespConnectorClient.from_settings(url_of(redis_server, timeout=0.5))
        buf = memoryview(bytearray(1024))
        await client.set("before", buf)
        pause(redis_server)
        try:
            with pytest.raises(ConnectorError, match="batch_set: ") as info:
                await client.set("stalled", buf)
            assert isinstance(info.value, RuntimeError), "LMCache code catching RuntimeError still works"
            assert await client.batch_get(["before"], [buf]) == [False]
        finally:
            resume(redis_server)
        client.close()

    run(scenario)


def test_non_mp_close_with_work_pending_settles_every_future(redis_server: RedisServer, clean_env: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        client = RespConnectorClient.from_settings(url_of(redis_server))
        pools = [lmcache_pool([1 << 20] * 8) for _ in range(6)]
        tasks = [asyncio.ensure_future(client.batch_set([f"close:{j}:{i}" for i in range(8)], bufs))
                 for j, (_pool, bufs) in enumerate(pools)]
        tasks.append(asyncio.ensure_future(client.batch_exists(["close:0:0"])))
        tasks.append(asyncio.ensure_future(client.batch_get(["close:0:0"], [pools[0][1][0]])))
        await asyncio.sleep(0)  # every task has submitted and waits on its future
        assert "8 pending" in repr(client)
        client.close()
        outcomes = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
        for outcome in outcomes[:6]:  # SETs: done, or failed because the client closed
            assert outcome is None or ("closed" in str(outcome) and isinstance(outcome, (ConnectorError, ClosedError)))
        assert outcomes[6] in ([True], [False]) or isinstance(outcomes[6], (ConnectorError, ClosedError))
        assert outcomes[7] in ([True], [False]), "a GET cut short by close is a miss, not an exception"
        with pytest.raises(ClosedError):
            await client.batch_exists(["x"])
        client.close()  # idempotent
        assert client.closed

    run(scenario)


def test_non_mp_needs_a_loop() -> None:
    with pytest.raises(RuntimeError, match="needs an event loop"):
        RespConnectorClient.from_settings("resp://127.0.0.1:1")


# -- MP: LMCache's native_plugin L2 adapter, emulated ---------------------------------------------

# As a user pastes it: credentials stay in LMCACHE_RESP_USERNAME / LMCACHE_RESP_PASSWORD.
L2_ADAPTER = """{"type": "native_plugin", "module_path": "lmcache_resp.lmcache.mp", "class_name": "RespConnector",
  "adapter_params": {"host": "127.0.0.1", "port": PORT, "num_workers": 4, "username": "", "password": ""}}"""

REQUIRED_METHODS = ("event_fd", "submit_batch_get", "submit_batch_set", "submit_batch_exists",
                    "drain_completions", "close")


def load_native_plugin(l2_adapter: str) -> Any:
    """What LMCache's native_plugin factory does: import, getattr, keyword-only construction,
    then a check that the interface is there."""
    config = json.loads(l2_adapter)
    assert config["type"] == "native_plugin"
    module = importlib.import_module(config["module_path"])
    connector_class = getattr(module, config["class_name"])
    connector = connector_class(**config.get("adapter_params", {}))
    for name in REQUIRED_METHODS:
        assert callable(getattr(connector, name, None)), f"{name} missing"
    assert callable(getattr(connector, "submit_batch_delete", None)), "delete makes L2 eviction work"
    return connector


class Demux:
    """MP mode's demux thread: poll the eventfd (level-triggered), drain until empty."""

    def __init__(self, connector: Any) -> None:
        self.connector = connector
        self.poller = select.poll()
        self.poller.register(connector.event_fd(), select.POLLIN)
        self.done: dict[int, tuple[int, bool, str, list[bool] | None]] = {}
        self.cond = threading.Condition()
        self.stop = threading.Event()
        self.drains = 0
        self.thread = threading.Thread(target=self.loop, name="lmcache-demux")
        self.thread.start()

    def loop(self) -> None:
        while not self.stop.is_set():
            if not self.poller.poll(50):
                continue
            while completions := self.connector.drain_completions():
                self.drains += 1
                with self.cond:
                    for completion in completions:
                        assert completion[0] not in self.done, "a completion was delivered twice"
                        self.done[completion[0]] = completion
                    self.cond.notify_all()

    def wait(self, future_id: int, timeout: float = 20) -> tuple[int, bool, str, list[bool] | None]:
        with self.cond:
            assert self.cond.wait_for(lambda: future_id in self.done, timeout), f"future {future_id} never completed"
            return self.done.pop(future_id)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive()


def test_mp_native_plugin_with_env_credentials(secure_server: RedisServer, clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("LMCACHE_RESP_USERNAME", "alice")
    clean_env.setenv("LMCACHE_RESP_PASSWORD", "s3cret-alice-pw")
    document = L2_ADAPTER.replace("PORT", str(secure_server.port))
    connector = load_native_plugin(document)
    assert type(connector) is RespConnector
    assert RespSettings.from_lmcache(document, env={}).port == secure_server.port
    assert connector.settings.username == "alice"
    demux = Demux(connector)
    submit_lock = threading.Lock()  # MP mode calls submit under its own lock
    ids: list[int] = []
    failures: list[str] = []

    def controller(t: int) -> None:
        try:
            sizes = [4096, 100 + t, 256 * 1024]
            _pool, bufs = lmcache_pool(sizes)
            data = [pattern(n, 10 * t + i) for i, n in enumerate(sizes)]
            for buf, d in zip(bufs, data):
                buf[:] = d
            keys = [f"meta-llama/Llama-3.1-8B@{t:08x}@0@{i:064x}" for i in range(3)]
            with submit_lock:
                fid = connector.submit_batch_set(keys, bufs)
                ids.append(fid)
            assert demux.wait(fid) == (fid, True, "", None)
            _pool2, outs = lmcache_pool(sizes + [512, 512])
            with submit_lock:
                fid = connector.submit_batch_get(keys + [f"missing:{t}:a", f"missing:{t}:b"], outs)
                ids.append(fid)
            _id, ok, error, per_key = demux.wait(fid)
            # LMCache reads per_key even when ok is False: a miss must be a False bit.
            assert per_key == [True, True, True, False, False] and ok and error == ""
            assert [bytes(o) for o in outs[:3]] == data
            with submit_lock:
                fid = connector.submit_batch_exists([keys[0], f"missing:{t}:a"])
                ids.append(fid)
            assert demux.wait(fid)[1:] == (True, "", [True, False])
            with submit_lock:
                fid = connector.submit_batch_delete([keys[2], f"missing:{t}:a"])
                ids.append(fid)
            assert demux.wait(fid)[1:] == (True, "", [True, False])
        except AssertionError as exc:
            failures.append(f"controller {t}: {exc}")

    threads = [threading.Thread(target=controller, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    demux.close()
    assert not failures, failures
    assert len(set(ids)) == len(ids) == 16, "future ids are unique across operation kinds"
    assert demux.drains >= 1
    time.sleep(0.05)
    assert demux.poller.poll(0) == [], "drained: the eventfd is no longer readable"
    connector.close()


def test_mp_adapter_params_typos_fail_the_construction(redis_server: RedisServer) -> None:
    config = json.loads(L2_ADAPTER.replace("PORT", str(redis_server.port)))
    config["adapter_params"]["num_worker"] = 3
    with pytest.raises(InvalidInputError, match="did you mean 'num_workers'"):
        load_native_plugin(json.dumps(config))
    del config["adapter_params"]["num_worker"]
    config["evictoin"] = {"eviction_policy": "LRU"}
    with pytest.raises(InvalidInputError, match="unknown key\\(s\\) beside adapter_params.*'evictoin'"):
        RespSettings.from_lmcache(config, env={})


def test_mp_capacity_and_eviction_belong_to_lmcache_at_the_top_level(
    redis_server: RedisServer, clean_env: pytest.MonkeyPatch
) -> None:
    """MP mode: LMCache accounts for usage and runs the eviction controller from the keys at
    the top level of the adapter JSON, deleting through submit_batch_delete. The connector
    does not evict on its own there (two evictors would disagree), so the same keys inside
    adapter_params are an error that says where they go."""
    config = json.loads(L2_ADAPTER.replace("PORT", str(redis_server.port)))
    eviction = {"eviction_policy": "LRU", "trigger_watermark": 0.8, "eviction_ratio": 0.2}
    config.update(max_capacity_gb=0.5, eviction=eviction)
    connector = load_native_plugin(json.dumps(config))
    assert connector.capacity_stats is None, "LMCache's keys: the connector tracks nothing itself"
    connector.close()
    assert RespSettings.from_lmcache(config, env={}).capacity_bytes == 0
    config["adapter_params"].update(max_capacity_gb=0.5, eviction=eviction)
    with pytest.raises(InvalidInputError, match="in MP mode LMCache owns capacity and eviction.*top level"):
        load_native_plugin(json.dumps(config))


def test_the_non_mp_plugin_module_imports_without_lmcache() -> None:
    """LMCache stays an optional dependency: the plugin's module imports without it, and only
    looking up the class (what LMCache's loader does, with LMCache installed) needs it."""
    import subprocess
    import sys

    for module in ("lmcache_resp.lmcache.non_mp", "lmcache_resp.lmcache"):
        code = (
            f"import sys, {module} as p\n"
            "assert 'lmcache' not in sys.modules, 'imported LMCache'\n"
            "try:\n    p.RespRemoteConnector\nexcept ModuleNotFoundError as e:\n    print('needs', e.name)\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
        assert out.strip() == "needs lmcache", module


# A stand-in for LMCache's RemoteConnector base, where LMCache's loader finds it: the real one is
# in lmcache-tests (scripts/test-lmcache.sh), which loads both paths through LMCache's own code.
STAND_IN_LMCACHE = {
    "lmcache/__init__.py": "",
    "lmcache/v1/__init__.py": "",
    "lmcache/v1/storage_backend/__init__.py": "",
    "lmcache/v1/storage_backend/connector/__init__.py": "",
    "lmcache/v1/storage_backend/connector/base_connector.py": (
        "class RemoteConnector:\n    def __init__(self, config, metadata):\n        pass\n"
    ),
}
LOAD_THE_PLUGIN = """
import importlib, sys, types
from lmcache_resp.lmcache import non_mp

module_path = sys.argv[1]
config = types.SimpleNamespace(remote_storage_plugins=["resp"], save_unfull_chunk=False, use_layerwise=False,
    extra_config={"remote_storage_plugin.resp.module_path": module_path,
                  "remote_storage_plugin.resp.class_name": "RespRemoteConnector",
                  "remote_storage_plugin.resp.port": 7123})
# What LMCache's DynamicConnectorAdapter does: import the module_path, look the class_name up.
loaded = getattr(importlib.import_module(module_path), "RespRemoteConnector")
assert loaded is non_mp.RespRemoteConnector, (loaded, non_mp.RespRemoteConnector)
assert loaded.__module__ == "lmcache_resp.lmcache.non_mp" and loaded.__name__ == "RespRemoteConnector"
print(non_mp.settings_from_lmcache_config(config).port)
"""


@pytest.mark.parametrize("module_path", ["lmcache_resp.lmcache.non_mp"])
def test_the_non_mp_plugin_loads_by_its_path(module_path: str, tmp_path: Path) -> None:
    """``remote_storage_plugin.<name>.module_path: lmcache_resp.lmcache.non_mp`` loads the class,
    and a config naming it is this plugin's: its settings keys are read. (The alias kept for the
    path documented before the adapters moved, ``lmcache_resp.lmcache_plugin``, is gone: #45.)"""
    import subprocess
    import sys

    for name, text in STAND_IN_LMCACHE.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    result = subprocess.run([sys.executable, "-c", LOAD_THE_PLUGIN, module_path], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "7123"
