"""LMCache's MP mode (LMCache runs as its own server): ``RespConnector``, the native connector its
``native_plugin`` L2 adapter builds::

    --l2-adapter '{"type": "native_plugin", "module_path": "lmcache_resp.lmcache.mp",
                   "class_name": "RespConnector", "adapter_params": {"host": "127.0.0.1", ...}}'

The non-MP plugin drives it too, through :class:`~lmcache_resp.lmcache.non_mp.RespConnectorClient`.

LMCache builds it with keyword arguments only (``RespConnector(**adapter_params)``), polls
``event_fd()`` and calls ``drain_completions()`` when it is readable. Submits take LMCache's
memoryviews (any sizes, in bytes), never block on I/O, and are safe from several threads.
Every batch completes, misses are False bits (never errors of the whole batch), failures of
single keys name the key, and ``close()`` completes or fails everything in flight.

``RespConnector(bridge=PATH)`` goes through a bridge (``python -m lmcache_resp.bridge``)
instead of opening its own connections: the bridge holds the connections, the I/O threads and
the credentials; each value is copied once between LMCache's buffer and a page of the bridge's
arena (see docs/bridge.md).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lmcache_resp import _native, metrics
from lmcache_resp._completions import CompletionRouter
from lmcache_resp._front import EngineFront
from lmcache_resp._logging import adopt_lmcache_logging
from lmcache_resp._native import BatchResult
from lmcache_resp._placement import log_placement
from lmcache_resp.errors import ClosedError, InvalidInputError
from lmcache_resp.settings import RespSettings

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from lmcache_resp._typing import AdapterParams

__all__ = ["RespConnector"]

logger = logging.getLogger("lmcache_resp")

Completion = tuple[int, bool, str, list[bool] | None]

_POSITIONAL = ("host", "port", "num_workers", "username", "password")


class RespConnector(EngineFront[_native.Connector]):
    """LMCache's native connector over Redis/Valkey.

    Built the way LMCache builds it, ``RespConnector(**adapter_params)``: ``host``, ``port``,
    ``num_workers``, ``username``, ``password``, ``max_capacity_gb``, ``eviction`` (LMCache's
    block), and the extras ``url``, ``unix_path``, ``db``, ``timeout``,
    ``connections_per_worker``, ``cpu_affinity``, and TLS's (a ``rediss://`` url or ``ssl``,
    ``ssl_ca_certs``, ``ssl_ca_path``, ``ssl_certfile``, ``ssl_keyfile``,
    ``ssl_check_hostname``, ``ssl_cert_reqs``, ``ssl_server_name``), and Sentinel's (a
    ``redis+sentinel://`` url or ``sentinel_nodes`` and ``sentinel_service_name``, with
    ``sentinel_username``, ``sentinel_password``, ``sentinel_tls``). LMCache's conventions
    apply: an empty value (or port 0) means "not set", so ``$LMCACHE_RESP_*`` fill it in.
    Unknown settings are errors (see :meth:`RespSettings.from_adapter_params <lmcache_resp.settings.RespSettings.from_adapter_params>`).
    """

    def __init__(self, *positional: Any, **params: Unpack[AdapterParams]) -> None:
        bridge = params.pop("bridge", None)
        if bridge:
            self._attach(str(bridge), positional, dict(params))
            return
        # Positionally, LMCache's C++ client's order: (host, port, num_workers, username, password).
        if len(positional) > len(_POSITIONAL):
            raise TypeError(f"RespConnector takes at most {len(_POSITIONAL)} positional arguments: {', '.join(_POSITIONAL)}")
        given: dict[str, Any] = dict(params)
        for name, value in zip(_POSITIONAL, positional):
            if given.get(name) is not None:
                raise TypeError(f"RespConnector got {name} twice, positionally and by keyword")
            given[name] = value
        self._start(RespSettings.from_adapter_params({k: v for k, v in given.items() if v is not None}))

    @classmethod
    def from_settings(cls, settings: RespSettings) -> RespConnector:
        """A connector for settings resolved already (``RespSettings.resolve``/``from_lmcache``)."""
        connector = cls.__new__(cls)
        connector._start(settings)
        return connector

    @classmethod
    def attach(cls, bridge: str, timeout: float = 10.0) -> RespConnector:
        """A connector through the bridge listening at the Unix socket ``bridge``."""
        connector = cls.__new__(cls)
        connector._attach(bridge, (), {"timeout": timeout})
        return connector

    def _attach(self, bridge: str, positional: tuple[Any, ...], params: dict[str, Any]) -> None:
        # The bridge owns every connection setting; only how long to wait for it applies here.
        timeout = params.pop("timeout", None)
        given = [name for name, value in params.items() if value not in (None, "", 0)]
        if positional or given:
            named = ", ".join(given) or "positional arguments"
            raise InvalidInputError(
                f"RespConnector(bridge=...): the bridge holds the connection settings; {named} cannot be set here "
                "(set them where the bridge starts)"
            )
        self._settings: RespSettings | None = None
        adopt_lmcache_logging()
        self._native = _native.Connector.attach(bridge, timeout=float(timeout) if timeout else 10.0)
        self._router = CompletionRouter(self._native)
        metrics.track(self, local=False)
        logger.info("RespConnector: through %s (%d I/O workers there)", self._native.endpoint, self._native.num_workers)

    def _start(self, settings: RespSettings) -> None:
        self._settings = settings
        adopt_lmcache_logging()
        logger.info("RespConnector: settings %s", settings.to_dict())
        self._native = _native.Connector(settings)
        self._router = CompletionRouter(self._native)
        metrics.track(self)
        logger.info(
            "RespConnector: %d I/O workers to %s", self._native.num_workers, settings.endpoint
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
        return [result.to_lmcache() for result in self._router.take_unclaimed()]

    def drain(self) -> list[BatchResult]:
        """Completed batches as :class:`~lmcache_resp._native.BatchResult` (typed per-key
        results); clears the eventfd like ``drain_completions``."""
        return self._router.take_unclaimed()

    @property
    def router(self) -> CompletionRouter:
        """Where finished batches go: asyncio and blocking waiters (RespConnectorClient)."""
        return self._router

    def close(self) -> None:
        self._native.close()
        self._router.close(ClosedError("the connector was closed"))

    @property
    def settings(self) -> RespSettings | None:
        """The connection settings; None through a bridge, which holds them."""
        return self._settings

    def __repr__(self) -> str:
        state = ", closed" if self._native.closed else ""
        # Through a bridge (no settings here), the bridge's settings say whether it is TLS.
        tls = ", tls" if self._settings is not None and self._settings.ssl else ""
        return f"RespConnector({self._native.endpoint!r}{tls}, num_workers={self._native.num_workers}{state})"
