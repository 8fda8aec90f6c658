"""Drives LMCache's own redis-py-based connector (lmcache.v1.storage_backend.connector.
redis_connector.RedisConnector: what a ``redis://`` or ``rediss://`` remote_url gives an LMCache
user today) for the benchmark, in an interpreter that has LMCache (and torch).

Run by file path (``PYTHON lmcache_redis_driver.py``), it speaks the JSON lines of
lmcache_driver.py: ``init`` builds the connector as LMCache does (a LocalCPUBackend over a host
memory allocator, the connector's own asyncio loop in a thread) and allocates one memory object
per key; ``set`` is one ``batched_put`` of all keys, ``get`` one ``get`` per key gathered on the
loop (the connector has no batched GET), ``exists`` likewise. Each chunk is stored as LMCache
stores it: its bytes under ``<key>kv_bytes`` and a small header under ``<key>metadata``. GETs
are verified here, outside the timed part. It must not import lmcache_resp.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import os
import resource
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np


def _sibling(name: str) -> ModuleType:
    """A module of this folder, loaded by path (run by path, the folder is off sys.path)."""
    path = Path(__file__).resolve().with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"lmcache_resp_bench_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_driver = _sibling("lmcache_driver")
MAX_REPORTED_MISMATCHES: int = _driver.MAX_REPORTED_MISMATCHES
load_pattern = _driver.load_pattern

__all__ = ["RedisSession"]


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _bytes_of(memory_obj: Any) -> np.ndarray:
    view = memoryview(memory_obj.byte_array)
    return np.asarray(view.cast("B") if view.format != "B" else view)


class RedisSession:
    def __init__(self) -> None:
        self.pattern = load_pattern()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.connector: Any = None
        self.objects: list[Any] = []
        self.keys: list[Any] = []
        self.names: list[str] = []
        self.chunk = 0
        self.seed = 0
        self.timeout = 60.0

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        try:
            if op == "init":
                return self._init(request)
            if op == "close":
                self._close()
                return {"ok": True}
            if op in ("set", "get", "exists"):
                return self._batch(str(op), int(request.get("round", 0)), int(request.get("repeat", 1)))
            return {"ok": False, "error": f"unknown request {op!r}"}
        except TimeoutError:
            return {"ok": False, "hung": True, "error": f"{op} did not finish within {self.timeout:g} s (peer hung)"}
        except Exception as exc:  # reported to the parent, which marks the peer failed
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}

    def _init(self, request: dict[str, Any]) -> dict[str, Any]:
        # By name: LMCache and torch are in that interpreter, not in lmcache_resp's.
        torch: Any = importlib.import_module("torch")
        CacheEngineKey = importlib.import_module("lmcache.utils").CacheEngineKey
        LMCacheEngineConfig = importlib.import_module("lmcache.v1.config").LMCacheEngineConfig
        HostMemoryAllocator = importlib.import_module(
            "lmcache.v1.memory_allocators.host_memory_allocator").HostMemoryAllocator
        MemoryFormat = importlib.import_module("lmcache.v1.memory_management").MemoryFormat
        LMCacheMetadata = importlib.import_module("lmcache.v1.metadata").LMCacheMetadata
        RedisConnector = importlib.import_module(
            "lmcache.v1.storage_backend.connector.redis_connector").RedisConnector
        LocalCPUBackend = importlib.import_module("lmcache.v1.storage_backend.local_cpu_backend").LocalCPUBackend

        self.chunk = int(request["chunk_bytes"])
        if self.chunk % 4:
            return {"ok": False, "error": f"chunks of {self.chunk} bytes: LMCache's bf16 KV chunks need a multiple of 4"}
        self.seed = int(request["seed"])
        self.timeout = float(request["timeout"])
        count = int(request["num_keys"])
        model = str(request["model"])
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="lmcache-redis-loop", daemon=True).start()
        config = LMCacheEngineConfig.from_defaults(chunk_size=256, local_cpu=False, max_local_cpu_size=1.0)
        metadata = LMCacheMetadata(model_name=model, world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
                                   kv_dtype=torch.bfloat16, kv_shape=(1, 2, 256, 1, 128), use_mla=False)
        # Room for the stored objects and as many again for what GET allocates.
        allocator = HostMemoryAllocator(2 * count * self.chunk + (64 << 20))
        backend = LocalCPUBackend(config=config, metadata=metadata, memory_allocator=allocator)
        self.connector = RedisConnector(url=str(request["url"]), loop=self.loop, local_cpu_backend=backend)
        shape = torch.Size([2, 1, self.chunk // 4, 1])
        self.objects = [backend.allocate(shape, torch.bfloat16, MemoryFormat.KV_2LTD) for _ in range(count)]
        if any(o is None for o in self.objects):
            return {"ok": False, "error": "LMCache's allocator could not hold the batch"}
        self.keys = [CacheEngineKey(model, 1, 0, i, torch.bfloat16) for i in range(count)]
        self.names = [k.to_string() + suffix for k in self.keys for suffix in ("kv_bytes", "metadata")]
        version = getattr(importlib.import_module("lmcache"), "__version__", "?")
        return {"ok": True, "client": f"{RedisConnector.__module__}.{RedisConnector.__qualname__}",
                "lmcache": version, "python": sys.version.split()[0],
                "redis_keys": self.names}

    def _run(self, coroutine: Any) -> Any:
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(self.timeout)

    def _batch(self, op: str, round_index: int, repeat: int) -> dict[str, Any]:
        if self.connector is None:
            return {"ok": False, "error": "not initialised"}
        if op == "set":
            for i, obj in enumerate(self.objects):
                self.pattern.fill(_bytes_of(obj), self.seed, round_index, i)
        conn = self.connector

        async def get_all() -> list[Any]:
            return list(await asyncio.gather(*(conn.get(k) for k in self.keys)))

        async def exists_all() -> int:
            found = 0
            for _ in range(max(1, repeat)):
                found += sum(await asyncio.gather(*(conn.exists(k) for k in self.keys)))
            return found

        cpu_before = _cpu_seconds()
        started = time.perf_counter()
        result: Any = None
        if op == "set":
            self._run(conn.batched_put(self.keys, self.objects))
        elif op == "get":
            result = self._run(get_all())
        else:
            result = self._run(exists_all())
        seconds = time.perf_counter() - started
        cpu = _cpu_seconds() - cpu_before
        reply: dict[str, Any] = {"ok": True, "error": "", "seconds": seconds, "cpu_seconds": cpu}
        if op == "get":
            reply["mismatches"] = self._verify(round_index, result)
        if op == "exists":
            reply["true_count"] = int(result)
        return reply

    def _verify(self, round_index: int, objects: list[Any]) -> list[dict[str, Any]]:
        mismatches: list[dict[str, Any]] = []
        for i, obj in enumerate(objects):
            if obj is None:
                if len(mismatches) < MAX_REPORTED_MISMATCHES:
                    mismatches.append({"key": self.names[2 * i], "reason": "GET reported a miss for a key just written"})
                continue
            offset = self.pattern.first_difference(_bytes_of(obj), self.seed, round_index, i, self.chunk)
            if offset is not None and len(mismatches) < MAX_REPORTED_MISMATCHES:
                mismatches.append({"key": self.names[2 * i], "reason": "bytes differ from what was written",
                                   "offset": offset})
            obj.ref_count_down()  # back to LMCache's allocator, as its storage manager does
        return mismatches

    def _close(self) -> None:
        if self.connector is not None and self.loop is not None:
            for obj in self.objects:
                obj.ref_count_down()
            self.objects = []
            try:
                self._run(self.connector.close())
            finally:
                self.connector = None
                self.loop.call_soon_threadsafe(self.loop.stop)


if __name__ == "__main__":
    # Run by path, Python puts this folder first on sys.path, where its sibling modules could
    # shadow LMCache's own imports.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    _driver.serve(RedisSession)
