"""LMCache's non-MP mode: an asyncio client with ``ConnectorClientBase`` semantics.

:class:`RespConnectorClient` drives a native connector (a :class:`~lmcache_resp.RespConnector`
or any object with LMCache's native-connector interface) from one asyncio event loop: it
watches ``event_fd()`` with ``loop.add_reader`` and resolves one future per submitted batch.
The ``*_sync`` variants block the calling thread instead and may be called from any thread
other than the loop's, while the loop runs.

What a batch returns:

- ``batch_get`` -> one bool per key (True = the value was read into its buffer). A miss is
  False, never an exception. A key that failed (e.g. a value larger than its buffer) is False
  as well, and a warning names it and its error: LMCache's MP mode reads ``per_key`` even
  when the batch is not ok, and this client does the same. Only a batch that failed as a
  whole, with no per-key answer, raises :class:`ConnectorError`.
- ``batch_set`` -> None, or :class:`ConnectorError` carrying the connector's error text.
- ``batch_exists`` -> one bool per key, or :class:`ConnectorError` if the batch failed.

The buffers of a batch are kept alive until its completion has been drained.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from lmcache_resp._lifecycle import Closeable
from lmcache_resp.errors import ClosedError, RespError
from lmcache_resp.settings import RespSettings

__all__ = ["ConnectorError", "NativeConnector", "RespConnectorClient"]

logger = logging.getLogger("lmcache_resp")

Completion = tuple[int, bool, str, "list[bool] | None"]
AnyFuture = asyncio.Future[Any] | concurrent.futures.Future[Any]


class NativeConnector(Protocol):
    """LMCache's native-connector interface (what :class:`~lmcache_resp.RespConnector` is)."""

    def event_fd(self) -> int: ...
    def submit_batch_get(self, keys: Sequence[str], memoryviews: Sequence[Any]) -> int: ...
    def submit_batch_set(self, keys: Sequence[str], memoryviews: Sequence[Any]) -> int: ...
    def submit_batch_exists(self, keys: Sequence[str]) -> int: ...
    def drain_completions(self) -> list[tuple[int, bool, str, list[bool] | None]]: ...
    def close(self) -> None: ...


class ConnectorError(RespError, RuntimeError):
    """A batch failed: ``message`` is the connector's error text. A RuntimeError too, as
    LMCache's ``ConnectorClientBase`` raises."""


@dataclass
class _Pending:
    future: AnyFuture
    op: str
    keys: Sequence[str]
    # Holds the buffers until the completion arrives: the native side has their addresses.
    keepalive: tuple[Any, ...]


class RespConnectorClient(Closeable):
    """``ConnectorClientBase`` semantics over a native connector, on one asyncio loop.

    ``RespConnectorClient(connector, loop=None)`` takes ownership of ``connector`` (``close()``
    closes it); without ``loop``, the running loop is used. ``from_settings`` builds the
    connector from a :class:`~lmcache_resp.settings.RespSettings`, a URL or LMCache's JSON.
    """

    def __init__(self, connector: NativeConnector, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop if loop is not None else _running_loop_or_fail()
        self._connector = connector
        self._fd = int(connector.event_fd())
        # Held across submit + registration, and while draining: a completion can never be
        # drained before its future is registered.
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._closed = False
        self._on_loop_thread(lambda: self._loop.add_reader(self._fd, self._on_ready))

    @classmethod
    def from_settings(
        cls, settings: RespSettings | str | Mapping[str, Any], loop: asyncio.AbstractEventLoop | None = None
    ) -> RespConnectorClient:
        """A client over a new :class:`~lmcache_resp.RespConnector`: ``settings`` is a
        RespSettings, a URL (``resp://host:port``) or LMCache's L2 adapter config (dict)."""
        from lmcache_resp.connector import RespConnector

        if isinstance(settings, str):
            settings = RespSettings.from_url(settings)
        elif not isinstance(settings, RespSettings):
            settings = RespSettings.from_lmcache(settings)
        # The loop is checked before a connector (threads, connections) exists.
        loop = loop if loop is not None else _running_loop_or_fail()
        return cls(RespConnector.from_settings(settings), loop)

    # -- asyncio ---------------------------------------------------------------------------------

    async def batch_get(self, keys: Sequence[str], bufs: Sequence[Any]) -> list[bool]:
        """Reads each key into its buffer: True = hit; a miss or a failed key is False."""
        _check_lengths(keys, bufs)
        return list(await self._submit_async("get", keys, bufs, lambda: self._connector.submit_batch_get(keys, bufs)))

    async def batch_set(self, keys: Sequence[str], bufs: Sequence[Any]) -> None:
        _check_lengths(keys, bufs)
        await self._submit_async("set", keys, bufs, lambda: self._connector.submit_batch_set(keys, bufs))

    async def batch_exists(self, keys: Sequence[str]) -> list[bool]:
        return list(await self._submit_async("exists", keys, (), lambda: self._connector.submit_batch_exists(keys)))

    async def batched_exists(self, keys: Sequence[str]) -> list[bool]:
        """LMCache's other name for :meth:`batch_exists`."""
        return await self.batch_exists(keys)

    async def get(self, key: str, buf: Any) -> bool:
        return (await self.batch_get([key], [buf]))[0]

    async def set(self, key: str, buf: Any) -> None:
        await self.batch_set([key], [buf])

    async def exists(self, key: str) -> bool:
        return (await self.batch_exists([key]))[0]

    # -- blocking, from threads other than the loop's ---------------------------------------------

    def batch_get_sync(self, keys: Sequence[str], bufs: Sequence[Any]) -> list[bool]:
        _check_lengths(keys, bufs)
        return list(self._submit_sync("get", keys, bufs, lambda: self._connector.submit_batch_get(keys, bufs)))

    def batch_set_sync(self, keys: Sequence[str], bufs: Sequence[Any]) -> None:
        _check_lengths(keys, bufs)
        self._submit_sync("set", keys, bufs, lambda: self._connector.submit_batch_set(keys, bufs))

    def batch_exists_sync(self, keys: Sequence[str]) -> list[bool]:
        return list(self._submit_sync("exists", keys, (), lambda: self._connector.submit_batch_exists(keys)))

    def batched_exists_sync(self, keys: Sequence[str]) -> list[bool]:
        return self.batch_exists_sync(keys)

    def get_sync(self, key: str, buf: Any) -> bool:
        return self.batch_get_sync([key], [buf])[0]

    def set_sync(self, key: str, buf: Any) -> None:
        self.batch_set_sync([key], [buf])

    def exists_sync(self, key: str) -> bool:
        return self.batch_exists_sync([key])[0]

    # -- lifecycle ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Closes the connector (which completes or fails every batch in flight), delivers
        those completions, fails whatever is left with ClosedError, and stops watching the
        eventfd. Later calls raise ClosedError. Idempotent; callable from any thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._connector.close()
        finally:
            # After close() no native thread touches the buffers: the keepalives may go.
            self._deliver(self._drain_all_quietly())
            with self._lock:
                left, self._pending = self._pending, {}
            for pending in left.values():
                _settle(pending.future, error=ClosedError(f"batch_{pending.op}: the client was closed"))
            if not self._loop.is_closed():
                self._on_loop_thread(lambda: self._loop.remove_reader(self._fd))

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def connector(self) -> NativeConnector:
        return self._connector

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop



    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._pending)} pending"
        return f"RespConnectorClient({self._connector!r}, {state})"

    # -- internals -------------------------------------------------------------------------------

    def _submit_async(
        self, op: str, keys: Sequence[str], bufs: Sequence[Any], submit: Callable[[], int]
    ) -> asyncio.Future[Any]:
        if _running_loop() is not self._loop:
            raise RuntimeError("RespConnectorClient: await its methods on the loop it was built with")
        future: asyncio.Future[Any] = self._loop.create_future()
        self._register(op, keys, bufs, submit, future)
        return future

    def _submit_sync(self, op: str, keys: Sequence[str], bufs: Sequence[Any], submit: Callable[[], int]) -> Any:
        if _running_loop() is self._loop:
            raise RuntimeError("RespConnectorClient: the *_sync methods would block the event loop; await the async ones")
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self._register(op, keys, bufs, submit, future)
        return future.result()

    def _register(
        self, op: str, keys: Sequence[str], bufs: Sequence[Any], submit: Callable[[], int], future: AnyFuture
    ) -> None:
        with self._lock:
            if self._closed:
                raise ClosedError(f"batch_{op}: the client is closed")
            future_id = int(submit())
            self._pending[future_id] = _Pending(future, op, list(keys), tuple(bufs))

    def _on_ready(self) -> None:
        """The eventfd is readable: drain until empty (that clears readiness), settle futures."""
        if self._closed:
            return
        try:
            self._deliver(self._drain_all())
        except Exception as exc:  # noqa: BLE001 - a broken connector fails every waiter
            logger.error("RespConnectorClient: drain_completions failed (%s); failing all pending batches", exc)
            with self._lock:
                self._closed = True
                left, self._pending = self._pending, {}
            for pending in left.values():
                _settle(pending.future, error=ConnectorError(f"native drain_completions failed: {exc}"))
            self._loop.remove_reader(self._fd)

    def _drain_all(self) -> list[tuple[_Pending, Completion]]:
        matched: list[tuple[_Pending, Completion]] = []
        with self._lock:
            while completions := self._connector.drain_completions():
                for completion in completions:
                    pending = self._pending.pop(int(completion[0]), None)
                    if pending is None:
                        logger.debug("RespConnectorClient: completion %s of a batch it did not submit", completion[0])
                    else:
                        matched.append((pending, completion))
        return matched

    def _drain_all_quietly(self) -> list[tuple[_Pending, Completion]]:
        try:
            return self._drain_all()
        except Exception:  # noqa: BLE001 - closing: whatever is left fails with ClosedError
            return []

    def _deliver(self, matched: list[tuple[_Pending, Completion]]) -> None:
        # Outside the lock: settling a concurrent future runs its callbacks right here.
        for pending, (_id, ok, error, per_key) in matched:
            try:
                _settle(pending.future, result=_outcome(pending, ok, error, per_key))
            except ConnectorError as exc:
                _settle(pending.future, error=exc)

    def _on_loop_thread(self, action: Callable[[], object]) -> None:
        """Runs ``action`` now when safe (on the loop's thread, or the loop is not running),
        else hands it to the loop (add_reader/remove_reader are not thread-safe)."""
        if _running_loop() is self._loop or not self._loop.is_running():
            action()
        else:
            self._loop.call_soon_threadsafe(action)


def _outcome(pending: _Pending, ok: bool, error: str, per_key: list[bool] | None) -> list[bool] | None:
    """What the batch's future resolves to; ConnectorError for a failed batch."""
    if pending.op == "set":
        if not ok:
            raise ConnectorError(f"batch_set: {error}")
        return None
    answered = per_key is not None and len(per_key) == len(pending.keys)
    if ok and answered:
        return [bool(bit) for bit in per_key or ()]
    if pending.op == "get" and answered:
        _warn_failed_keys(pending.keys, error)
        return [bool(bit) for bit in per_key or ()]
    raise ConnectorError(f"batch_{pending.op}: {error or 'the connector answered no per-key result'}")


# RespConnector's error text names failed keys by index: "key 3: ValueTooLargeError: ...".
_FAILED_INDEX = re.compile(r"\bkey (\d+):")


def _warn_failed_keys(keys: Sequence[str], error: str) -> None:
    indices = sorted({int(i) for i in _FAILED_INDEX.findall(error) if int(i) < len(keys)})
    named = ", ".join(repr(keys[i]) for i in indices[:3]) + (" ..." if len(indices) > 3 else "")
    logger.warning(
        "batch_get: failed keys count as misses%s: %s", f" ({named})" if named else "", error
    )


def _settle(future: AnyFuture, *, result: Any = None, error: BaseException | None = None) -> None:
    """Resolves either kind of future from any thread, once."""
    if isinstance(future, concurrent.futures.Future):
        if not future.done():
            if error is None:
                future.set_result(result)
            else:
                future.set_exception(error)
        return
    loop = future.get_loop()
    if _running_loop() is loop:
        _set_if_pending(future, result, error)
    elif not loop.is_closed():
        loop.call_soon_threadsafe(_set_if_pending, future, result, error)


def _set_if_pending(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


def _check_lengths(keys: Sequence[str], bufs: Sequence[Any]) -> None:
    if len(keys) != len(bufs):
        raise ValueError(f"{len(keys)} keys but {len(bufs)} buffers")


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _running_loop_or_fail() -> asyncio.AbstractEventLoop:
    loop = _running_loop()
    if loop is None:
        raise RuntimeError("RespConnectorClient needs an event loop: pass loop=, or build it inside a coroutine")
    return loop
