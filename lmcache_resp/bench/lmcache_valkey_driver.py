"""Drives LMCache's glide-based Valkey client for the benchmark (``--compare lmcache-valkey``),
in an interpreter that has LMCache and valkey-glide-sync.

It uses LMCache's own ``ValkeyWorkerPool`` (in ``lmcache.v1.distributed.l2_adapters.valkey`` since
0.5.7, ``lmcache.v1.storage_backend.valkey`` in 0.5.6) exactly as LMCache's
``valkey`` L2 adapter (``ValkeyL2Adapter``) does: a batch is one future per key
(``submit_set`` of the buffer, ``submit_get_into`` the buffer, ``submit_exists``,
``submit_delete``), each future's done-callback counts the batch down under a lock, and the last
one signals an eventfd, which the caller waits on with select (as LMCache's L2 controller and
``lmcache bench l2`` wait on the adapter's). A GET counts as a hit when the pool copied exactly
the buffer's size, as the adapter counts it.

Run by file path (``PYTHON lmcache_valkey_driver.py``), it speaks the JSON lines of
lmcache_driver.py, whose Session it extends (the same pool of numpy buffers, the same
verification of every GET byte for byte, outside the timed part). It must not import
lmcache_resp.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
import resource
import runpy
import select
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np


# The JSON-lines driver this one extends, loaded by path (run by path, this folder is off sys.path).
_driver: dict[str, Any] = runpy.run_path(str(Path(__file__).resolve().with_name("lmcache_driver.py")),
                                         run_name="lmcache_resp_bench_lmcache_driver")

__all__ = ["ValkeySession"]

# Where LMCache keeps ValkeyWorkerPool, newest first (lmcache_valkey.POOL_MODULES).
POOL_MODULES = ("lmcache.v1.distributed.l2_adapters.valkey", "lmcache.v1.storage_backend.valkey")


def _worker_pool_class() -> Any:
    for module in POOL_MODULES:
        try:
            return importlib.import_module(module).ValkeyWorkerPool
        except ModuleNotFoundError as exc:
            if not module.startswith(str(exc.name)):
                raise
    raise ModuleNotFoundError(f"no ValkeyWorkerPool in LMCache: looked in {', '.join(POOL_MODULES)}")


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Batch:
    """One submitted batch, as the adapter's _SubmitTaskBatchState: per-key outcomes, counted
    down by the futures' callbacks; the last one signals ``fd``."""

    def __init__(self, count: int, fd: int, outcome: Callable[[Future[Any]], bool]) -> None:
        self.ok = [False] * count
        self.remaining = count
        self.lock = threading.Lock()
        self.fd = fd
        self.outcome = outcome

    def done(self, index: int, future: Future[Any]) -> None:
        try:
            ok = not future.cancelled() and future.exception() is None and self.outcome(future)
        except Exception:  # noqa: BLE001 - a failed key, as the adapter records it
            ok = False
        with self.lock:
            self.ok[index] = ok
            self.remaining -= 1
            last = self.remaining == 0
        if last:
            os.eventfd_write(self.fd, 1)


_Session: Any = _driver["Session"]


class ValkeySession(_Session):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.batch_bound = 60.0

    def _init(self, request: dict[str, Any]) -> dict[str, Any]:
        # By name: LMCache is in that interpreter, not in lmcache_resp's.
        ValkeyWorkerPool = _worker_pool_class()
        self.keys = [str(k) for k in request["keys"]]
        self.chunk = int(request["chunk_bytes"])
        self.seed = int(request["seed"])
        self.timeout = float(request["timeout"])
        # A batch still incomplete this long after its submit is reported as hung: every request
        # has glide's timeout, and a batch moves at least 100 MB/s on any machine this runs on.
        self.batch_bound = self.timeout + len(self.keys) * self.chunk / 1e8
        self.pool = np.zeros((len(self.keys), self.chunk), dtype=np.uint8)
        self.views = [row.data for row in self.pool]
        cluster = bool(request.get("cluster"))
        db = int(request.get("db") or 0)
        self.client = ValkeyWorkerPool(
            addresses=[(str(host), int(port)) for host, port in request["nodes"]],
            num_workers=int(request["num_workers"]),
            username=str(request.get("username") or ""),
            password=str(request.get("password") or ""),
            request_timeout=self.timeout,
            connection_timeout=min(self.timeout, 30.0),
            cluster_mode=cluster,
            database_id=None if cluster or db == 0 else db,
        )
        self.fd = os.eventfd(0, os.EFD_CLOEXEC)
        return {
            "ok": True,
            "client": f"{ValkeyWorkerPool.__module__}.{ValkeyWorkerPool.__qualname__}",
            "lmcache": _version("lmcache"),
            "glide": _version("valkey-glide-sync"),
            "buffer_get": bool(self.client.has_buffer_get),
            "python": sys.version.split()[0],
        }

    def _submit(self, op: str) -> _Batch:
        """One batch: a future per key, as ValkeyL2Adapter.submit_*_task submits them."""
        pool, keys = self.client, self.keys
        chunk = self.chunk
        submit: Callable[[int], Future[Any]]
        outcome: Callable[[Future[Any]], bool]
        if op == "set":
            submit, outcome = (lambda i: pool.submit_set(keys[i], self.views[i])), (lambda f: True)
        elif op == "get":
            submit, outcome = (lambda i: pool.submit_get_into(keys[i], self.views[i])), (lambda f: int(f.result()) == chunk)
        elif op == "exists":
            submit, outcome = (lambda i: pool.submit_exists(keys[i])), (lambda f: bool(f.result()))
        else:
            submit, outcome = (lambda i: pool.submit_delete(keys[i])), (lambda f: True)
        batch = _Batch(len(keys), self.fd, outcome)
        for i in range(len(keys)):
            submit(i).add_done_callback(functools.partial(batch.done, i))
        return batch

    def _wait(self, batch: _Batch) -> None:
        deadline = time.monotonic() + self.batch_bound
        while True:
            with batch.lock:
                if batch.remaining == 0:
                    break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise _driver["PeerHung"](f"{batch.remaining} of {len(batch.ok)} keys without a result "
                                       f"{self.batch_bound:g} s after the submit (peer hung)")
            if select.select([self.fd], [], [], remaining)[0]:
                os.eventfd_read(self.fd)

    def _batch(self, op: str, round_index: int, repeat: int = 1) -> dict[str, Any]:
        if self.client is None:
            return {"ok": False, "error": "not initialised"}
        self._prepare(op, round_index)
        batches = []
        cpu_before = _cpu_seconds()
        started = time.perf_counter()
        for _ in range(max(1, int(repeat))):
            batch = self._submit(op)
            self._wait(batch)
            batches.append(batch)
        seconds = time.perf_counter() - started
        cpu = _cpu_seconds() - cpu_before
        failed = sum(not ok for b in batches for ok in b.ok) if op in ("set", "delete") else 0
        reply: dict[str, Any] = {"ok": failed == 0, "seconds": seconds, "cpu_seconds": cpu,
                                 "error": f"{failed} of {len(self.keys)} keys failed" if failed else ""}
        if op == "exists":
            reply["true_count"] = sum(sum(b.ok) for b in batches)
        if op == "get":
            reply["mismatches"] = self._verify(round_index, batches[-1].ok)
        return reply


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "?"


if __name__ == "__main__":
    # Run by path, Python puts this folder first on sys.path, where its sibling modules could
    # shadow LMCache's own imports.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    _driver["serve"](ValkeySession)
