"""``RespConnector``: a drop-in native connector for LMCache (both deployment modes).

LMCache builds it with keyword arguments only (``RespConnector(**adapter_params)``), polls
``event_fd()`` and calls ``drain_completions()`` when it is readable. Submits take LMCache's
memoryviews (any sizes, in bytes), never block on I/O, and are safe from several threads.
Every batch completes, misses are False bits (never errors of the whole batch), failures of
single keys name the key, and ``close()`` completes or fails everything in flight.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from lmcache_resp import _native
from lmcache_resp._placement import log_placement
from lmcache_resp.config import ConnectionSettings, Secret, resolve_connection

__all__ = ["RespConnector"]

logger = logging.getLogger("lmcache_resp")

Completion = tuple[int, bool, str, list[bool] | None]


class RespConnector:
    def __init__(
        self,
        host: str | None = None,
        port: int | str | None = None,
        num_workers: int = 8,
        username: str | None = None,
        password: str | Secret | None = None,
        *,
        url: str | None = None,
        unix_path: str | None = None,
        db: int | None = None,
        timeout: float | None = None,
        connections_per_worker: int = 1,
        cpu_affinity: str = "auto",
        **unused: Any,
    ) -> None:
        self._settings = resolve_connection(
            host or None, port or None, url=url, unix_path=unix_path, username=username or None,
            password=password or None, db=db, timeout=timeout,
        )
        if unused:
            logger.warning("RespConnector: ignoring unknown settings %s", sorted(unused))
        self._native = _native.Connector(
            self._settings.host,
            self._settings.port,
            num_workers=int(num_workers),
            connections_per_worker=connections_per_worker,
            cpu_affinity=cpu_affinity,
            **self._settings.native_kwargs(),
        )
        logger.info(
            "RespConnector: %d I/O workers to %s", self._native.num_workers, self._settings.endpoint
        )
        log_placement("RespConnector", self._native.placement)

    def event_fd(self) -> int:
        return self._native.event_fd()

    def submit_batch_get(self, keys: Sequence[str], memoryviews: Sequence[Any]) -> int:
        return self._native.submit("get", keys, memoryviews)

    def submit_batch_set(self, keys: Sequence[str], memoryviews: Sequence[Any]) -> int:
        return self._native.submit("set", keys, memoryviews)

    def submit_batch_exists(self, keys: Sequence[str]) -> int:
        return self._native.submit("exists", keys)

    def submit_batch_delete(self, keys: Sequence[str]) -> int:
        return self._native.submit("delete", keys)

    def drain_completions(self) -> list[Completion]:
        return self._native.drain_completions()

    def close(self) -> None:
        self._native.close()

    @property
    def settings(self) -> ConnectionSettings:
        return self._settings

    @property
    def placement(self) -> dict[str, Any]:
        return self._native.placement

    def __enter__(self) -> RespConnector:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = ", closed" if self._native.closed else ""
        return f"RespConnector({self._settings.endpoint!r}, num_workers={self._native.num_workers}{state})"
