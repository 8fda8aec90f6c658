"""Routes completed batches to whoever waits for them: asyncio futures (woken through
``loop.add_reader`` on the completion eventfd, no polling thread) or, for batches submitted by
integrators, a queue that ``drain_completions()`` empties."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from lmcache_resp._results import KeyValue

__all__ = ["CompletionRouter"]

Drained = tuple[int, str, list[KeyValue]]


class CompletionRouter:
    def __init__(self, drain: Callable[[], list[Drained]], event_fd: int) -> None:
        self._drain = drain
        self._event_fd = event_fd
        self._lock = threading.Lock()
        self._futures: dict[int, asyncio.Future[Sequence[KeyValue]]] = {}
        self._unclaimed: deque[Drained] = deque()
        self._loops: set[asyncio.AbstractEventLoop] = set()

    def watch(self, submit: Callable[[], int]) -> asyncio.Future[Sequence[KeyValue]]:
        """Submits through ``submit`` and returns a future for the batch's per-key values."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Sequence[KeyValue]] = loop.create_future()
        with self._lock:
            if loop not in self._loops:
                loop.add_reader(self._event_fd, self.route)
                self._loops.add(loop)
            # Registered before the batch can complete: the lock is held across the submit, and
            # route() takes it before filing anything.
            batch_id = submit()
            self._futures[batch_id] = future
        return future

    def route(self) -> None:
        """Drains completions: resolves waiting futures, keeps the rest for drain_completions()."""
        with self._lock:
            for batch_id, op, values in self._drain():
                future = self._futures.pop(batch_id, None)
                if future is None:
                    self._unclaimed.append((batch_id, op, values))
                else:
                    _resolve(future, values)

    def take_unclaimed(self) -> list[Drained]:
        self.route()
        with self._lock:
            taken = list(self._unclaimed)
            self._unclaimed.clear()
        return taken

    def close(self) -> None:
        """After the native side closed: resolve the last futures, stop watching the eventfd."""
        self.route()
        with self._lock:
            loops, self._loops = self._loops, set()
        for loop in loops:
            if loop.is_closed():
                continue
            if _running_loop() is loop:
                loop.remove_reader(self._event_fd)
            else:
                loop.call_soon_threadsafe(loop.remove_reader, self._event_fd)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _resolve(future: asyncio.Future[Any], values: Sequence[KeyValue]) -> None:
    loop = future.get_loop()
    if _running_loop() is loop:
        if not future.done():
            future.set_result(values)
    elif not loop.is_closed():
        loop.call_soon_threadsafe(_set_if_pending, future, values)


def _set_if_pending(future: asyncio.Future[Any], values: Sequence[KeyValue]) -> None:
    if not future.done():
        future.set_result(values)
