"""lmcache-resp: the fastest, most dependable way to move LLM KV-cache pages between host
memory and Redis/Valkey.

- :class:`PagedRespStore`: a paged pool of KV-cache pages in a shared-memory arena, moved by
  Rust I/O threads (sync and asyncio).
- :class:`RedisClient`: a minimal zero-copy client for any buffer.
- :class:`RespSettings`: every setting, from a URL, LMCache's JSON, keywords and the environment.
- The LMCache adapters (:mod:`lmcache_resp.lmcache`, one module per LMCache mode):
  :class:`RespConnector`, the native connector of LMCache's MP mode (``lmcache.mp``), and
  :class:`RespConnectorClient`, the asyncio client (``ConnectorClientBase`` semantics) over it
  that ``RespRemoteConnector``, the remote storage plugin of LMCache's non-MP mode, drives
  (``lmcache.non_mp``).
- Every error in :mod:`lmcache_resp.errors`, all of them :class:`RespError`.

Command lines: ``python -m lmcache_resp.bridge`` (one engine for the host's processes),
``python -m lmcache_resp.topology`` (the placement plan) and ``python -m lmcache_resp.bench``
(the benchmark; the throwaway servers its options start are the wheel's second package,
:mod:`lmcache_resp_servers`, which imports nothing of this one). The test suites' fixtures are
not part of the package: they live in the repository's ``testing/lmcache_resp_testing``.
"""

from lmcache_resp._native import __version__
from lmcache_resp import _logging
from lmcache_resp.stats import EndpointStats, Histogram, Stats
from lmcache_resp.client import RedisClient
from lmcache_resp.lmcache.mp import RespConnector
from lmcache_resp.lmcache.non_mp import RespConnectorClient
from lmcache_resp._native import BatchResult
from lmcache_resp.settings import EvictionSettings, RespSettings, Secret
from lmcache_resp.store import Page, PagedRespStore
from lmcache_resp.errors import (
    AuthenticationError,
    BatchError,
    ClosedError,
    ConnectorError,
    EngineFailedError,
    ForkedError,
    InvalidInputError,
    PageError,
    PartialReadError,
    ProtocolError,
    RespConnectionError,
    RespError,
    RespOSError,
    RespTimeoutError,
    ServerError,
    TlsError,
    ValueTooLargeError,
)

__all__ = [
    "AuthenticationError",
    "BatchError",
    "BatchResult",
    "ClosedError",
    "ConnectorError",
    "EngineFailedError",
    "EndpointStats",
    "EvictionSettings",
    "Histogram",
    "ForkedError",
    "InvalidInputError",
    "Page",
    "PagedRespStore",
    "PageError",
    "PartialReadError",
    "ProtocolError",
    "RedisClient",
    "RespConnector",
    "RespConnectorClient",
    "RespConnectionError",
    "RespError",
    "RespOSError",
    "RespSettings",
    "RespTimeoutError",
    "Secret",
    "ServerError",
    "Stats",
    "TlsError",
    "ValueTooLargeError",
    "__version__",
]

_logging.start()
