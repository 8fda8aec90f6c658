"""The one completion router: finished batches go to whoever waits for them.

A native store or connector announces finished batches on its eventfd; ``drain()`` hands
them out as :class:`~lmcache_resp._native.BatchResult` objects. The router resolves the future
registered for each batch (an asyncio future on its loop, woken through ``loop.add_reader`` on
the eventfd with no polling thread, or a ``concurrent.futures`` future for a thread that
blocks) and keeps the rest for integrators, who collect them with :meth:`take_unclaimed`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections import deque
from collections.abc import Callable
from typing import Protocol

from lmcache_resp._native import BatchResult
from lmcache_resp.errors import RespError

__all__ = ["CompletionRouter", "Drainable"]

AnyFuture = asyncio.Future[BatchResult] | concurrent.futures.Future[BatchResult]


class Drainable(Protocol):
    def drain(self) -> list[BatchResult]: ...
    def event_fd(self) -> int: ...


class CompletionRouter:
    def __init__(self, native: Drainable) -> None:
        self._native = native
        self._event_fd = native.event_fd()
        self._lock = threading.Lock()
        self._futures: dict[int, AnyFuture] = {}
        self._unclaimed: deque[BatchResult] = deque()
        self._loops: set[asyncio.AbstractEventLoop] = set()

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """Drains whenever the eventfd is readable, on ``loop`` (idempotent; call on the
        loop's thread or before it runs)."""
        with self._lock:
            if loop in self._loops:
                return
            self._loops.add(loop)
        loop.add_reader(self._event_fd, self.route)

    def submit_async(self, submit: Callable[[], int]) -> asyncio.Future[BatchResult]:
        """Submits through ``submit`` and returns a future for the batch, on the running loop."""
        loop = asyncio.get_running_loop()
        self.watch(loop)
        future: asyncio.Future[BatchResult] = loop.create_future()
        self._register(submit, future)
        return future

    def submit_blocking(self, submit: Callable[[], int], loop: asyncio.AbstractEventLoop) -> BatchResult:
        """Submits through ``submit`` and blocks this thread until the batch is done. ``loop``
        (running on another thread) drains; call :meth:`watch` with it first."""
        if _running_loop() is loop:
            raise RuntimeError("a blocking call on the event loop's own thread would deadlock it: await instead")
        future: concurrent.futures.Future[BatchResult] = concurrent.futures.Future()
        self._register(submit, future)
        return future.result()

    def _register(self, submit: Callable[[], int], future: AnyFuture) -> None:
        # Registered before the batch can complete: the lock is held across the submit, and
        # route() takes it before filing anything.
        with self._lock:
            self._futures[submit()] = future

    def route(self) -> None:
        """Drains completions: resolves waiting futures, keeps the rest for take_unclaimed()."""
        failure: RespError | None = None
        settled: list[tuple[AnyFuture, BatchResult]] = []
        with self._lock:
            try:
                results = self._native.drain()
            except RespError as exc:
                # The native side cannot hand out results any more (a fork, a failed engine):
                # nobody waiting may hang.
                failure, results = exc, []
                left, self._futures = list(self._futures.values()), {}
            for result in results:
                future = self._futures.pop(result.id, None)
                if future is None:
                    self._unclaimed.append(result)
                else:
                    settled.append((future, result))
        # Outside the lock: settling a concurrent future runs its callbacks right here.
        for future, result in settled:
            _settle(future, result)
        if failure is not None:
            for future in left:
                _settle(future, error=failure)

    def take_unclaimed(self) -> list[BatchResult]:
        self.route()
        with self._lock:
            taken = list(self._unclaimed)
            self._unclaimed.clear()
        return taken

    def pending(self) -> int:
        with self._lock:
            return len(self._futures)

    def close(self, error: BaseException) -> None:
        """After the native side closed: resolve the last futures, fail any left with
        ``error``, stop watching the eventfd."""
        try:
            self.route()
        finally:
            with self._lock:
                left, self._futures = self._futures, {}
                loops, self._loops = self._loops, set()
            for future in left.values():
                _settle(future, error=error)
            for loop in loops:
                if loop.is_closed():
                    continue
                if _running_loop() is loop or not loop.is_running():
                    loop.remove_reader(self._event_fd)
                else:
                    loop.call_soon_threadsafe(loop.remove_reader, self._event_fd)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _settle(future: AnyFuture, result: BatchResult | None = None, error: BaseException | None = None) -> None:
    """Resolves either kind of future from any thread, once."""
    if isinstance(future, concurrent.futures.Future):
        if not future.done():
            if error is None:
                future.set_result(result)  # type: ignore[arg-type]
            else:
                future.set_exception(error)
        return
    loop = future.get_loop()
    if _running_loop() is loop:
        _set_if_pending(future, result, error)
    elif not loop.is_closed():
        loop.call_soon_threadsafe(_set_if_pending, future, result, error)


def _set_if_pending(future: asyncio.Future[BatchResult], result: BatchResult | None, error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(result)  # type: ignore[arg-type]
    else:
        future.set_exception(error)
