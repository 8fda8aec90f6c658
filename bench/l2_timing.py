"""A timing shim for LMCache's ``native_plugin`` L2 adapter (#43): wraps our ``RespConnector`` or
LMCache's own C++ ``LMCacheRedisClient`` (what its ``resp`` adapter builds) and records, per batch,
when LMCache submitted it and when LMCache's demux thread drained its completion. Both adapters
then sit behind the same ``NativeConnectorL2Adapter`` and the same shim, so what differs between
their traces is the connector itself. A measuring instrument for bench/vllm_prefetch_probe.py, not
a cache.

``--l2-adapter '{"type": "native_plugin", "module_path": "l2_timing", "class_name": "TimedConnector",
"adapter_params": {"inner": "ours" | "resp", "trace": PATH, ...the inner connector's params}}'``
(with this directory on LMCache's PYTHONPATH).

The trace is JSON lines: first ``{"event": "threads", "connector": [tids]}`` (the threads the inner
connector started: the set of the process's threads before and after building it), then one
``{"event": "submit", "op", "id", "keys", "bytes", "t0", "t1", "tid"}`` per batch (monotonic
nanoseconds before and after the inner submit) and one ``{"event": "drain", "t0", "t1", "ids",
"tid"}`` per drain call that returned something. It also times three steps of LMCache's own
prefetch path (patched into its classes when the shim is built, in LMCache's server process
only): ``{"event": "prefetch_submit", "t", "request"}`` (StorageManager.submit_prefetch_task),
``{"event": "published", "t"}`` (the prefetch controller's result published) and ``{"event":
"query", "t", "done"}`` (each StorageManager.query_prefetch_status: the engine's polls).
"""

from __future__ import annotations

import json
import os
import threading
import time
from typing import Any

__all__ = ["TimedConnector"]


_TRACES: list[TimedConnector] = []


def _record_everywhere(record: dict[str, Any]) -> None:
    for connector in _TRACES:
        connector._write(record)


def _patch_lmcache() -> None:
    """Times LMCache's prefetch steps (see the module's docs); once per process."""
    from lmcache.v1.distributed.storage_controllers.prefetch_controller import PrefetchController
    from lmcache.v1.distributed.storage_manager import StorageManager

    if getattr(StorageManager, "_l2_timing_patched", False):
        return
    submit, query, publish = (StorageManager.submit_prefetch_task, StorageManager.query_prefetch_status,
                              PrefetchController._publish_result)

    def timed_submit(self: Any, spec: Any, external_request_id: str = "", skip_l2: bool = False) -> Any:
        _record_everywhere({"event": "prefetch_submit", "t": time.monotonic_ns(), "request": external_request_id})
        return submit(self, spec, external_request_id=external_request_id, skip_l2=skip_l2)

    def timed_query(self: Any, handle: Any) -> Any:
        result = query(self, handle)
        _record_everywhere({"event": "query", "t": time.monotonic_ns(), "done": result is not None})
        return result

    def timed_publish(self: Any, request: Any, result: Any) -> None:
        publish(self, request, result)
        _record_everywhere({"event": "published", "t": time.monotonic_ns()})

    StorageManager.submit_prefetch_task = timed_submit
    StorageManager.query_prefetch_status = timed_query
    PrefetchController._publish_result = timed_publish
    StorageManager._l2_timing_patched = True


def _threads() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/task")}


class TimedConnector:
    def __init__(self, inner: str, trace: str, **params: Any) -> None:
        self._trace = open(trace, "a", buffering=1)  # noqa: SIM115 (kept open for the connector's life)
        self._lock = threading.Lock()
        before = _threads()
        if inner == "ours":
            from lmcache_resp.lmcache.mp import RespConnector

            self._inner: Any = RespConnector(**params)
        elif inner == "resp":
            from lmcache.lmcache_redis import LMCacheRedisClient

            self._inner = LMCacheRedisClient(params["host"], int(params["port"]), int(params.get("num_workers", 8)),
                                             "", "")
        else:
            raise ValueError(f"inner must be 'ours' or 'resp', not {inner!r}")
        time.sleep(0.5)  # the inner connector's threads started
        self._write({"event": "threads", "inner": inner, "connector": sorted(_threads() - before)})
        _TRACES.append(self)
        _patch_lmcache()

    def _write(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._trace.write(json.dumps(record, separators=(",", ":")) + "\n")

    def event_fd(self) -> int:
        return int(self._inner.event_fd())

    def _submit(self, op: str, call: Any, keys: list[str], *rest: Any) -> int:
        size = sum(len(memoryview(b).cast("B")) for b in rest[0]) if rest else 0
        t0 = time.monotonic_ns()
        future = int(call(keys, *rest))
        t1 = time.monotonic_ns()
        self._write({"event": "submit", "op": op, "id": future, "keys": len(keys), "bytes": size, "t0": t0, "t1": t1,
                     "tid": threading.get_native_id()})
        return future

    def submit_batch_get(self, keys: list[str], memoryviews: list[Any]) -> int:
        return self._submit("get", self._inner.submit_batch_get, keys, memoryviews)

    def submit_batch_set(self, keys: list[str], memoryviews: list[Any]) -> int:
        return self._submit("set", self._inner.submit_batch_set, keys, memoryviews)

    def submit_batch_exists(self, keys: list[str]) -> int:
        return self._submit("exists", self._inner.submit_batch_exists, keys)

    def submit_batch_delete(self, keys: list[str]) -> int:
        return self._submit("delete", self._inner.submit_batch_delete, keys)

    def drain_completions(self) -> list[Any]:
        t0 = time.monotonic_ns()
        done = list(self._inner.drain_completions())
        t1 = time.monotonic_ns()
        if done:
            self._write({"event": "drain", "t0": t0, "t1": t1, "ids": [int(c[0]) for c in done],
                         "tid": threading.get_native_id()})
        return done

    def close(self) -> None:
        self._inner.close()
        self._trace.close()
