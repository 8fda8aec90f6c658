"""Drives LMCache's native C++ RESP connector for the benchmark, in whatever interpreter can
import it (often a venv of its own: the connector needs torch's libraries).

Run by file path (``PYTHON lmcache_driver.py``), it speaks JSON lines: one request on stdin,
one reply on stdout. It must not import lmcache_resp (that interpreter does not have it); it
loads its sibling ``pattern.py`` by path so both sides write the same bytes. numpy is required.

Requests: ``init`` (connect, allocate one pool of num_keys equal-sized buffers: the connector
takes every buffer's size from the first one), then ``set``/``get``/``exists``/``delete`` with
a round number: ONE batch of all keys through the connector, waited for on its event_fd with
select (every wait bounded: a GET of a missing key can hang the connector), completions
drained until that batch's future id arrives. GETs are verified here, outside the timed part.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import resource
import select
import sys
import time
from pathlib import Path
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

__all__ = ["Session", "load_pattern", "serve"]

MAX_REPORTED_MISMATCHES = 10


def load_pattern() -> ModuleType:
    path = Path(__file__).resolve().with_name("pattern.py")
    spec = importlib.util.spec_from_file_location("lmcache_resp_bench_pattern", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def resolve_factory(spec: str) -> Any:
    """``module:callable`` -> the callable building a connector ``(host, port, workers, user, password)``."""
    module_name, _, attribute = spec.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class PeerHung(Exception):
    pass


class Session:
    def __init__(self) -> None:
        self.pattern = load_pattern()
        self.client: Any = None
        self.fd = -1
        self.keys: list[str] = []
        self.chunk = 0
        self.seed = 0
        self.timeout = 60.0
        self.pool: Any = None
        self.views: list[memoryview] = []

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        try:
            if op == "init":
                return self._init(request)
            if op == "close":
                if self.client is not None:
                    self.client.close()
                    self.client = None
                return {"ok": True}
            if op in ("set", "get", "exists", "delete"):
                return self._batch(str(op), int(request.get("round", 0)), int(request.get("repeat", 1)))
            return {"ok": False, "error": f"unknown request {op!r}"}
        except PeerHung as exc:
            return {"ok": False, "hung": True, "error": str(exc)}
        except Exception as exc:  # reported to the parent, which marks the peer failed
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}

    def _init(self, request: dict[str, Any]) -> dict[str, Any]:
        factory = resolve_factory(str(request.get("factory", "lmcache_peer:client")))
        self.keys = [str(k) for k in request["keys"]]
        self.chunk = int(request["chunk_bytes"])
        self.seed = int(request["seed"])
        self.timeout = float(request["timeout"])
        self.pool = np.zeros((len(self.keys), self.chunk), dtype=np.uint8)
        self.views = [memoryview(row) for row in self.pool]
        self.client = factory(
            str(request["host"]), int(request["port"]), int(request["num_workers"]),
            str(request.get("username") or ""), str(request.get("password") or ""),
        )
        self.fd = int(self.client.event_fd())
        return {"ok": True, "client": f"{type(self.client).__module__}.{type(self.client).__qualname__}",
                "numpy": np.__version__, "python": sys.version.split()[0]}

    def _wait(self, future_id: int) -> tuple[bool, str, list[bool] | None]:
        deadline = time.monotonic() + self.timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PeerHung(f"no completion for batch {future_id} within {self.timeout:g} s (peer hung)")
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if not ready:
                continue
            for completion in self.client.drain_completions():
                if completion[0] == future_id:
                    per_key = completion[3]
                    return bool(completion[1]), str(completion[2]), None if per_key is None else [bool(b) for b in per_key]

    def _prepare(self, op: str, round_index: int) -> None:
        """Before a batch, outside its timing: a SET's round pattern in every buffer, a GET's
        buffers poisoned (so that a buffer it never wrote cannot pass verification)."""
        if op == "set":
            for i, row in enumerate(self.pool):
                self.pattern.fill(row, self.seed, round_index, i)
        elif op == "get":
            self.pool.fill(self.pattern.POISON)

    def _batch(self, op: str, round_index: int, repeat: int = 1) -> dict[str, Any]:
        if self.client is None:
            return {"ok": False, "error": "not initialised"}
        self._prepare(op, round_index)
        submit: Callable[[], Any] = {
            "set": lambda: self.client.submit_batch_set(self.keys, self.views),
            "get": lambda: self.client.submit_batch_get(self.keys, self.views),
            "exists": lambda: self.client.submit_batch_exists(self.keys),
            "delete": lambda: self.client.submit_batch_delete(self.keys),
        }[op]
        repeat = max(1, int(repeat))
        cpu_before = _cpu_seconds()
        started = time.perf_counter()
        outcomes = [self._wait(int(submit())) for _ in range(repeat)]
        seconds = time.perf_counter() - started
        cpu = _cpu_seconds() - cpu_before
        ok = all(o[0] for o in outcomes)
        error = "; ".join(o[1] for o in outcomes if o[1])
        per_key = outcomes[-1][2]
        reply: dict[str, Any] = {"ok": ok, "error": error, "seconds": seconds, "cpu_seconds": cpu}
        if per_key is not None:
            reply["true_count"] = sum(sum(o[2] or []) for o in outcomes)
        if op == "get":
            reply["mismatches"] = self._verify(round_index, per_key)
        return reply

    def _verify(self, round_index: int, hits: list[bool] | None) -> list[dict[str, Any]]:
        mismatches: list[dict[str, Any]] = []
        for i, row in enumerate(self.pool):
            if len(mismatches) >= MAX_REPORTED_MISMATCHES:
                break
            if hits is not None and not hits[i]:
                mismatches.append({"key": self.keys[i], "reason": "GET reported a miss for a key just written"})
                continue
            offset = self.pattern.first_difference(row, self.seed, round_index, i, self.chunk)
            if offset is not None:
                mismatches.append({"key": self.keys[i], "reason": "bytes differ from what was written", "offset": offset})
        return mismatches


def serve(session_type: Callable[[], Any] = Session) -> None:
    """Answers requests on stdin with ``session_type()``'s replies on stdout, until ``close``."""
    # Replies go to a private copy of stdout; fd 1 becomes stderr, so whatever the connector
    # (or torch) prints cannot break the JSON-lines channel.
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    session = session_type()
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        reply = session.handle(request)
        replies.write(json.dumps(reply) + "\n")
        replies.flush()
        if request.get("op") == "close":
            break


if __name__ == "__main__":
    # Run by path, Python puts this folder first on sys.path, where its sibling modules
    # (peers.py, report.py, ...) could shadow the connector's own imports.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    serve()
