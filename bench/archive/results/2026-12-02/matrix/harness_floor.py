"""The floor of `lmcache bench l2` itself: a native_plugin connector that does no I/O.

Every batch completes inside its submit call (values kept in a dict in this process), so what
LMCache's bench times for it is LMCache's own path: its adapter's lock and task bookkeeping, the
eventfd to its demux thread, that thread's drain and Bitmap, the eventfd back to the bench loop,
and the bench loop's wake-up. No connector can take less; a lookup that both real adapters finish
within a few hundredths of a millisecond of this floor cannot be 2x faster on one of them.

Used as: --l2-adapter '{"type":"native_plugin","module_path":"harness_floor",
"class_name":"NullConnector","adapter_params":{}}' with this directory on PYTHONPATH.
"""
from __future__ import annotations

import collections
import itertools
import os
from typing import Any


class NullConnector:
    def __init__(self, **_params: Any) -> None:
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._values: dict[str, bytes] = {}
        self._done: collections.deque[tuple[int, bool, str, list[bool] | None]] = collections.deque()
        self._ids = itertools.count(1)

    def event_fd(self) -> int:
        return self._fd

    def _complete(self, results: list[bool] | None) -> int:
        future_id = next(self._ids)
        self._done.append((future_id, True, "", results))
        os.eventfd_write(self._fd, 1)
        return future_id

    def submit_batch_set(self, keys: list[str], views: list[memoryview]) -> int:
        for key, view in zip(keys, views, strict=True):
            self._values[key] = bytes(view)
        return self._complete(None)

    def submit_batch_get(self, keys: list[str], views: list[memoryview]) -> int:
        found = []
        for key, view in zip(keys, views, strict=True):
            value = self._values.get(key)
            if value is not None and len(value) == len(view):
                view.cast("B")[:] = value
            found.append(value is not None)
        return self._complete(found)

    def submit_batch_exists(self, keys: list[str]) -> int:
        return self._complete([key in self._values for key in keys])

    def submit_batch_delete(self, keys: list[str]) -> int:
        return self._complete([self._values.pop(key, None) is not None for key in keys])

    def drain_completions(self) -> list[tuple[int, bool, str, list[bool] | None]]:
        try:
            os.eventfd_read(self._fd)
        except BlockingIOError:
            pass
        done = []
        while self._done:
            done.append(self._done.popleft())
        return done

    def close(self) -> None:
        os.close(self._fd)
