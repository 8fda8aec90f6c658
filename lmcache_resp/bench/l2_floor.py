"""The floor of LMCache's own benchmark: a ``native_plugin`` connector without a server.

``--compare lmcache-l2 --l2-adapters ours,resp,floor`` runs `lmcache bench l2` over this class
beside the real adapters. Every batch completes inside its submit call: a store keeps a view of
the caller's buffer (no copy), a load copies from it, a lookup is a dict lookup. What LMCache's
bench then times is LMCache's own path (its adapter's lock and task bookkeeping, the eventfd to
its demux thread, that thread's drain and bitmaps, the eventfd back to the bench loop) plus, for
loads, one memory copy. No adapter that talks to a server can go below it, so it tells how much
of each figure is LMCache's and how much is left to win.

A store keeps a view of a buffer it does not own: the bench keeps its store buffers alive and
unchanged for the whole run, which any other caller would have to promise too. This is a
measuring instrument, not a cache.
"""

from __future__ import annotations

import collections
import itertools
import os
import threading
from typing import Any

__all__ = ["NullConnector"]

# (future id, ok, error message, per-key results or None)
Completion = tuple[int, bool, str, "list[bool] | None"]


class NullConnector:
    """LMCache's native connector interface (``event_fd``, ``submit_batch_*``,
    ``drain_completions``, ``close``), answered in memory."""

    def __init__(self, **_adapter_params: Any) -> None:
        self._event = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._values: dict[str, memoryview] = {}
        self._done: collections.deque[Completion] = collections.deque()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def event_fd(self) -> int:
        return self._event

    def submit_batch_set(self, keys: list[str], buffers: list[Any]) -> int:
        with self._lock:
            for key, buffer in zip(keys, buffers, strict=True):
                self._values[key] = memoryview(buffer).cast("B")
        return self._complete(None)

    def submit_batch_get(self, keys: list[str], buffers: list[Any]) -> int:
        found = []
        with self._lock:
            for key, buffer in zip(keys, buffers, strict=True):
                value = self._values.get(key)
                target = memoryview(buffer).cast("B")
                hit = value is not None and len(value) == len(target)
                if value is not None and hit:
                    target[:] = value
                found.append(hit)
        return self._complete(found)

    def submit_batch_exists(self, keys: list[str]) -> int:
        with self._lock:
            found = [key in self._values for key in keys]
        return self._complete(found)

    def submit_batch_delete(self, keys: list[str]) -> int:
        with self._lock:
            deleted = [self._values.pop(key, None) is not None for key in keys]
        return self._complete(deleted)

    def drain_completions(self) -> list[Completion]:
        try:
            os.eventfd_read(self._event)
        except BlockingIOError:
            pass
        done = []
        while self._done:
            done.append(self._done.popleft())
        return done

    def close(self) -> None:
        with self._lock:
            self._values.clear()
        os.close(self._event)

    def _complete(self, results: list[bool] | None) -> int:
        future_id = next(self._ids)
        self._done.append((future_id, True, "", results))
        os.eventfd_write(self._event, 1)
        return future_id
