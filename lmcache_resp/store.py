"""``PagedRespStore``: a paged pool of KV-cache pages in a shared-memory arena, moved to and
from Redis/Valkey by Rust I/O threads, sync and asyncio."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lmcache_resp import _native, metrics
from lmcache_resp._completions import CompletionRouter
from lmcache_resp._front import EngineFront
from lmcache_resp._native import BatchResult, Page
from lmcache_resp._placement import log_placement
from lmcache_resp.errors import ClosedError, InvalidInputError
from lmcache_resp.settings import RespSettings

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from lmcache_resp._typing import SettingsKwargs

__all__ = ["Page", "PagedRespStore"]

logger = logging.getLogger("lmcache_resp")

Key = str | bytes


class PagedRespStore(EngineFront[_native.PagedStore]):
    """A pool of ``page_size``-byte pages in a shared-memory arena, and batched, pipelined,
    zero-copy GET/SET/EXISTS/DELETE of whole pages (or page prefixes) against Redis/Valkey.

    ``cpu_affinity``: ``auto`` (the CPUs and memory of the NUMA node nearest the NIC that
    reaches the server; no pinning when there is no such device, e.g. loopback), ``none``, a
    CPU list like ``0-3,8``, or ``numa:N``. The choice and its reasons are logged.

    Connect with a URL (``resp://``, ``redis://``, ``unix://``) or ``host``/``port``;
    credentials default to ``$LMCACHE_RESP_USERNAME`` / ``$LMCACHE_RESP_PASSWORD``. Every key
    of a batch completes, with success or an error, within ``timeout`` seconds of submission.
    All methods are safe to call from several threads.

    ``max_capacity_gb`` (0 = off) caps what this store tracks as stored in Redis; ``eviction``
    (``{"eviction_policy": "LRU", "trigger_watermark": 0.8, "eviction_ratio": 0.2}``) says
    when and how much to delete. ``prefault`` (default True) faults the arena's pages in at
    creation, so the first batch does not pay for it. Settings resolve as
    :meth:`RespSettings.resolve <lmcache_resp.settings.RespSettings.resolve>` says (explicit >
    URL > environment > default) and are logged, the password as ``***``; see ``settings``.
    ``settings=`` takes a ready :class:`RespSettings` instead.

    What a batch reports: a hit means the whole value was received; a miss leaves the page
    untouched; a key whose value was only partly received (its connection broke) fails with
    :class:`~lmcache_resp.errors.PartialReadError`, never a miss.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        page_size: int,
        num_pages: int | None = None,
        pool_size: int | None = None,
        settings: RespSettings | None = None,
        **given: Unpack[SettingsKwargs],
    ) -> None:
        if settings is None:
            settings = RespSettings.resolve(url, **given)
        elif url is not None or any(v is not None for v in given.values()):
            raise InvalidInputError("give settings= or the individual settings, not both")
        self._settings: RespSettings | None = settings
        logger.info("PagedRespStore: settings %s", settings.to_dict())
        self._native = _native.PagedStore(settings, page_size=page_size, num_pages=num_pages, pool_size=pool_size)
        self._router = CompletionRouter(self._native)
        metrics.track(self)
        logger.info(
            "PagedRespStore: %d pages of %d bytes in arena %s, %d I/O workers, server %s",
            self._native.num_pages, page_size, self._native.arena_name, settings.num_workers, settings.endpoint,
        )
        log_placement("PagedRespStore", self._native.placement)

    @classmethod
    def attach(cls, socket: str | os.PathLike[str], *, timeout: float = 10.0) -> PagedRespStore:
        """A store over the page pool and I/O engine of the bridge listening at ``socket``
        (``python -m lmcache_resp.bridge``): the same API, the pool shared with the bridge's
        other clients, no connection or credentials of its own. ``free_pages`` counts the
        shared pool. If the bridge goes away, every call raises ``RespConnectionError``; attach
        again once it is back."""
        store = cls.__new__(cls)
        store._settings = None
        store._native = _native.PagedStore.attach(os.fspath(socket), timeout=timeout)
        store._router = CompletionRouter(store._native)
        metrics.track(store, local=False)
        logger.info("PagedRespStore: attached to %s", store._native.endpoint)
        return store

    # -- pages ---------------------------------------------------------------------------

    def allocate(self) -> Page | None:
        """A free page, or None when every page is in use."""
        return self._native.allocate()

    def allocate_many(self, n: int) -> list[Page]:
        """``n`` pages, or PageError (nothing allocated) if fewer are free."""
        return self._native.allocate_many(n)

    def free(self, page: Page) -> None:
        """Returns a page to the pool. PageError on a double free, a page of another store or
        a page an operation in flight still uses."""
        self._native.free(page)

    # -- blocking batches ----------------------------------------------------------------

    def put(self, keys: Sequence[Key], pages: Sequence[Page], lengths: Sequence[int] | None = None) -> None:
        """Stores each page (or its first ``lengths[i]`` bytes) under its key. A key may
        appear once per batch."""
        self._native.run("set", keys, pages, lengths).check("put")

    def get(self, keys: Sequence[Key], pages: Sequence[Page]) -> list[bool]:
        """Reads each key into its page: True for a hit, False for a miss (page untouched).
        A value larger than its page fails that key (BatchError; the rest complete)."""
        return _checked(self._native.run("get", keys, pages), "get").hits

    def get_lengths(self, keys: Sequence[Key], pages: Sequence[Page]) -> list[int | None]:
        """Like ``get``, with the bytes received per key (None for a miss)."""
        return _checked(self._native.run("get", keys, pages), "get").lengths

    def exists(self, keys: Sequence[Key]) -> list[bool]:
        return _checked(self._native.run("exists", keys), "exists").hits

    def delete(self, keys: Sequence[Key]) -> list[bool]:
        """True for each key that existed and was deleted."""
        return _checked(self._native.run("delete", keys), "delete").hits

    def run(self, op: str, keys: Sequence[Key], pages: Sequence[Page] | None = None) -> BatchResult:
        """One batch of ``op`` ("get", "set", "exists", "delete"), its per-key result as it
        is, failures included (nothing raised for a failed key)."""
        return self._native.run(op, keys, pages)

    # -- asyncio ---------------------------------------------------------------------------

    async def aput(self, keys: Sequence[Key], pages: Sequence[Page], lengths: Sequence[int] | None = None) -> None:
        _checked(await self._router.submit_async(lambda: self._native.submit("set", keys, pages, lengths)), "put")

    async def aget(self, keys: Sequence[Key], pages: Sequence[Page]) -> list[bool]:
        result = await self._router.submit_async(lambda: self._native.submit("get", keys, pages))
        return _checked(result, "get").hits

    async def aexists(self, keys: Sequence[Key]) -> list[bool]:
        return _checked(await self._router.submit_async(lambda: self._native.submit("exists", keys)), "exists").hits

    async def adelete(self, keys: Sequence[Key]) -> list[bool]:
        return _checked(await self._router.submit_async(lambda: self._native.submit("delete", keys)), "delete").hits

    # -- for integrators: submit now, collect when event_fd() is readable -------------------

    def submit_put(self, keys: Sequence[Key], pages: Sequence[Page], lengths: Sequence[int] | None = None) -> int:
        return self._native.submit("set", keys, pages, lengths)

    def submit_get(self, keys: Sequence[Key], pages: Sequence[Page]) -> int:
        return self._native.submit("get", keys, pages)

    def submit_exists(self, keys: Sequence[Key]) -> int:
        return self._native.submit("exists", keys)

    def submit_delete(self, keys: Sequence[Key]) -> int:
        return self._native.submit("delete", keys)

    def drain(self) -> list[BatchResult]:
        """Completed ``submit_*`` batches; clears the eventfd."""
        return self._router.take_unclaimed()

    def drain_completions(self) -> list[tuple[int, bool, str, list[bool] | None]]:
        """Completed ``submit_*`` batches as LMCache's ``(id, ok, error, per_key)``."""
        return [result.to_lmcache() for result in self._router.take_unclaimed()]

    def event_fd(self) -> int:
        """Readable while completed ``submit_*`` batches wait to be drained."""
        return self._native.event_fd()

    # -- lifecycle and facts -----------------------------------------------------------------

    def close(self) -> None:
        """Completes or fails everything in flight; later calls raise ClosedError. Idempotent."""
        self._native.close()
        self._router.close(ClosedError("the store was closed"))

    @property
    def page_size(self) -> int:
        return self._native.page_size

    @property
    def num_pages(self) -> int:
        return self._native.num_pages

    @property
    def free_pages(self) -> int:
        return self._native.free_pages

    @property
    def num_workers(self) -> int:
        return self._native.num_workers

    @property
    def arena_fd(self) -> int:
        """The arena's memfd: another process can map the pages through /proc/<pid>/fd/<fd>."""
        return self._native.arena_fd

    @property
    def arena_name(self) -> str:
        return self._native.arena_name

    @property
    def arena_size(self) -> int:
        return self._native.arena_size

    @property
    def settings(self) -> RespSettings | None:
        """The settings this store was built from; None when attached to a bridge (which
        keeps its settings, credentials included, to itself)."""
        return self._settings

    @property
    def worker_threads(self) -> list[tuple[int, int | None]]:
        """``(kernel thread id, planned CPU)`` of each I/O worker."""
        return self._native.worker_threads

    def __repr__(self) -> str:
        s = self._settings
        state = ", closed" if self._native.closed else ""
        if s is None:
            return f"PagedRespStore({self._native.endpoint!r}, page_size={self._native.page_size}{state})"
        tls = ", tls" if s.ssl else ""
        return (
            f"PagedRespStore({s.endpoint!r}{tls}, page_size={self._native.page_size}, "
            f"num_pages={self._native.num_pages}, num_workers={self._native.num_workers}{state})"
        )


def _checked(result: BatchResult, what: str) -> BatchResult:
    """The result, after raising BatchError if a key failed."""
    result.check(what)
    return result
