"""What every front over the I/O engine answers the same way, written once: the server it talks
to, whether it is closed, where its I/O threads run and which loop they run, client-side
capacity tracking, and the engine's counters.

:class:`~lmcache_resp.PagedRespStore`, LMCache's :class:`~lmcache_resp.RespConnector`, SGLang's
``RespHiCacheStorage`` and vLLM's ``RespSecondaryTierManager`` are fronts; each holds its native
object (``_native.PagedStore`` or ``_native.Connector``) as ``_native``.
"""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar

from lmcache_resp._lifecycle import Closeable
from lmcache_resp.stats import Stats

__all__ = ["EngineFront"]


class _NativeFront(Protocol):
    """What ``_native.PagedStore`` and ``_native.Connector`` both answer."""

    @property
    def endpoint(self) -> str: ...
    @property
    def closed(self) -> bool: ...
    @property
    def placement(self) -> dict[str, Any]: ...
    @property
    def capacity_stats(self) -> dict[str, Any] | None: ...
    def stats(self) -> dict[str, Any]: ...


_N = TypeVar("_N", bound=_NativeFront)


class EngineFront(Closeable, Generic[_N]):
    """The facts of a front over the I/O engine (see the module's docs); ``_N`` is the type of
    its native object."""

    __slots__ = ()
    _native: _N

    @property
    def endpoint(self) -> str:
        """The server (or servers, or the bridge's socket) this front talks to."""
        return self._native.endpoint

    @property
    def closed(self) -> bool:
        return self._native.closed

    @property
    def placement(self) -> dict[str, Any]:
        """Where the I/O threads run and the arena lives (``worker_cpus``, ``cpuset``,
        ``memory_node``) and why (``explanation``); which loop they run (``io_loop``:
        ``{"loop": "poll" or "uring", "setting": io_backend, "why": ...}``, None through a
        bridge, whose own placement names it)."""
        return self._native.placement

    @property
    def capacity_stats(self) -> dict[str, Any] | None:
        """Client-side capacity tracking: capacity_bytes, stored_bytes, reserved_bytes, keys,
        evictions, evicted_bytes, eviction_runs, policy. None when ``max_capacity_gb`` is 0."""
        return self._native.capacity_stats

    def stats(self) -> Stats:
        """The engine's counters (through a bridge, the bridge engine's): docs/observability.md."""
        return Stats(self._native.stats())
