"""LMCache's non-MP mode: an asyncio client with ``ConnectorClientBase`` semantics.

:class:`RespConnectorClient` drives a :class:`~lmcache_resp.RespConnector` from one asyncio
event loop: its completion router watches the connector's eventfd with ``loop.add_reader``
and resolves one future per submitted batch. The ``*_sync`` variants block the calling thread
instead and may be called from any thread other than the loop's, while the loop runs; their
futures are registered before the batch is submitted, so no completion is ever lost (unlike
LMCache's ``ConnectorClientBase``, see docs/lmcache.md).

What a batch returns:

- ``batch_get`` -> one bool per key (True = the whole value was read into its buffer). A miss
  is False, never an exception, and so is a value whose length is not the buffer's (LMCache's
  chunks have fixed sizes). A key that failed (its connection broke, say) is False as well,
  and a warning names it and its error: LMCache's MP mode reads ``per_key`` even when the
  batch is not ok, and this client does the same.
- ``batch_set`` -> None, or :class:`ConnectorError` carrying the failures.
- ``batch_exists`` -> one bool per key, or :class:`ConnectorError` if any key failed.
- ``batch_delete`` -> one bool per key (True = it existed and is gone), or
  :class:`ConnectorError` if any key failed.

The connector holds a batch's buffers until its completion has been drained.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lmcache_resp.stats import Stats
from lmcache_resp._lifecycle import Closeable
from lmcache_resp._native import BatchResult
from lmcache_resp.connector import RespConnector
from lmcache_resp.errors import ClosedError, InvalidInputError, RespError
from lmcache_resp.settings import RespSettings

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from lmcache_resp._typing import SettingsKwargs

__all__ = ["ConnectorError", "RespConnectorClient"]

logger = logging.getLogger("lmcache_resp")


class ConnectorError(RespError, RuntimeError):
    """A batch failed: ``message`` names the failed keys and their errors. A RuntimeError
    too, as LMCache's ``ConnectorClientBase`` raises."""


class RespConnectorClient(Closeable):
    """``ConnectorClientBase`` semantics over a :class:`~lmcache_resp.RespConnector`, on one
    asyncio loop.

    ``RespConnectorClient(connector, loop=None)`` takes ownership of ``connector``
    (``close()`` closes it); without ``loop``, the running loop is used. ``from_settings``
    builds the connector from a :class:`~lmcache_resp.settings.RespSettings`, a URL or
    LMCache's JSON.
    """

    def __init__(self, connector: RespConnector, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._loop = loop if loop is not None else _running_loop_or_fail()
        self._connector = connector
        self._router = connector.router
        self._closed = False
        self._on_loop_thread(lambda: self._router.watch(self._loop))

    @classmethod
    def from_settings(
        cls,
        settings: RespSettings | str | Mapping[str, Any],
        loop: asyncio.AbstractEventLoop | None = None,
        **given: Unpack[SettingsKwargs],
    ) -> RespConnectorClient:
        """A client over a new :class:`~lmcache_resp.RespConnector`: ``settings`` is a
        RespSettings, a URL (``resp://host:port``, ``rediss://host:6380``) or LMCache's L2
        adapter config (dict). With a URL, keyword settings (``ssl_ca_certs=...``) override
        it; a RespSettings or a config holds its own."""
        explicit: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        if isinstance(settings, str):
            settings = RespSettings.from_url(settings, **explicit)
        elif explicit:
            raise InvalidInputError(
                f"keyword settings ({', '.join(sorted(explicit))}) go with a URL: put them in the "
                f"{'RespSettings' if isinstance(settings, RespSettings) else 'LMCache config'} instead"
            )
        elif not isinstance(settings, RespSettings):
            settings = RespSettings.from_lmcache(settings)
        # The loop is checked before a connector (threads, connections) exists.
        loop = loop if loop is not None else _running_loop_or_fail()
        return cls(RespConnector.from_settings(settings), loop)

    # -- asyncio ---------------------------------------------------------------------------------

    async def batch_get(self, keys: Sequence[str], bufs: Sequence[Any]) -> list[bool]:
        """Reads each key into its buffer: True = hit; a miss or a failed key is False."""
        return _get_hits(keys, await self._submit_async("get", lambda: self._connector.submit_batch_get(keys, bufs)))

    async def batch_set(self, keys: Sequence[str], bufs: Sequence[Any]) -> None:
        _raise_failures(await self._submit_async("set", lambda: self._connector.submit_batch_set(keys, bufs)))

    async def batch_exists(self, keys: Sequence[str]) -> list[bool]:
        result = await self._submit_async("exists", lambda: self._connector.submit_batch_exists(keys))
        return _raise_failures(result).hits

    async def batched_exists(self, keys: Sequence[str]) -> list[bool]:
        """LMCache's other name for :meth:`batch_exists`."""
        return await self.batch_exists(keys)

    async def batch_delete(self, keys: Sequence[str]) -> list[bool]:
        """Deletes each key: True where it existed. Through the connector, so its capacity
        tracker sees the deletes."""
        result = await self._submit_async("delete", lambda: self._connector.submit_batch_delete(keys))
        return _raise_failures(result).hits

    async def delete(self, key: str) -> bool:
        return (await self.batch_delete([key]))[0]

    async def get(self, key: str, buf: Any) -> bool:
        return (await self.batch_get([key], [buf]))[0]

    async def set(self, key: str, buf: Any) -> None:
        await self.batch_set([key], [buf])

    async def exists(self, key: str) -> bool:
        return (await self.batch_exists([key]))[0]

    # -- blocking, from threads other than the loop's ---------------------------------------------

    def batch_get_sync(self, keys: Sequence[str], bufs: Sequence[Any]) -> list[bool]:
        return _get_hits(keys, self._submit_blocking("get", lambda: self._connector.submit_batch_get(keys, bufs)))

    def batch_set_sync(self, keys: Sequence[str], bufs: Sequence[Any]) -> None:
        _raise_failures(self._submit_blocking("set", lambda: self._connector.submit_batch_set(keys, bufs)))

    def batch_exists_sync(self, keys: Sequence[str]) -> list[bool]:
        return _raise_failures(self._submit_blocking("exists", lambda: self._connector.submit_batch_exists(keys))).hits

    def batched_exists_sync(self, keys: Sequence[str]) -> list[bool]:
        return self.batch_exists_sync(keys)

    def batch_delete_sync(self, keys: Sequence[str]) -> list[bool]:
        return _raise_failures(self._submit_blocking("delete", lambda: self._connector.submit_batch_delete(keys))).hits

    def delete_sync(self, key: str) -> bool:
        return self.batch_delete_sync([key])[0]

    def get_sync(self, key: str, buf: Any) -> bool:
        return self.batch_get_sync([key], [buf])[0]

    def set_sync(self, key: str, buf: Any) -> None:
        self.batch_set_sync([key], [buf])

    def exists_sync(self, key: str) -> bool:
        return self.batch_exists_sync([key])[0]

    # -- lifecycle ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Closes the connector, which completes or fails every batch in flight and delivers
        those completions; later calls raise ClosedError. Idempotent; callable from any
        thread."""
        if self._closed:
            return
        self._closed = True
        self._connector.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def stats(self) -> Stats:
        """The connector's counters (docs/observability.md)."""
        return self._connector.stats()

    @property
    def connector(self) -> RespConnector:
        return self._connector

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{self._router.pending()} pending"
        return f"RespConnectorClient({self._connector!r}, {state})"

    # -- internals -------------------------------------------------------------------------------

    def _submit_async(self, op: str, submit: Callable[[], int]) -> asyncio.Future[BatchResult]:
        if _running_loop() is not self._loop:
            raise RuntimeError("RespConnectorClient: await its methods on the loop it was built with")
        self._check_open(op)
        return self._router.submit_async(submit)

    def _submit_blocking(self, op: str, submit: Callable[[], int]) -> BatchResult:
        if _running_loop() is self._loop:
            raise RuntimeError("RespConnectorClient: the *_sync methods would block the event loop; await the async ones")
        self._check_open(op)
        return self._router.submit_blocking(submit, self._loop)

    def _check_open(self, op: str) -> None:
        if self._closed:
            raise ClosedError(f"batch_{op}: the client is closed")

    def _on_loop_thread(self, action: Callable[[], object]) -> None:
        """Runs ``action`` now when safe (on the loop's thread, or the loop is not running),
        else hands it to the loop (add_reader is not thread-safe)."""
        if _running_loop() is self._loop or not self._loop.is_running():
            action()
        else:
            self._loop.call_soon_threadsafe(action)


def _get_hits(keys: Sequence[str], result: BatchResult) -> list[bool]:
    """GET's per-key bits; failed keys count as misses and are named in a warning."""
    if not result.ok:
        named = ", ".join(repr(keys[i]) for i, _ in result.failures[:3]) + (" ..." if len(result.failures) > 3 else "")
        logger.warning("batch_get: failed keys count as misses (%s): %s", named, result.error)
    return result.hits


def _raise_failures(result: BatchResult) -> BatchResult:
    if not result.ok:
        raise ConnectorError(f"batch_{result.op}: {result.error}")
    return result


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
