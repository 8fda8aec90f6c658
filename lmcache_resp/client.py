"""``RedisClient``: the minimal zero-copy client for any buffer."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Literal

from lmcache_resp import _native, metrics
from lmcache_resp.stats import Stats
from lmcache_resp._lifecycle import Closeable
from lmcache_resp.settings import RespSettings, Secret

if TYPE_CHECKING:
    from lmcache_resp._typing import Buffer

__all__ = ["RedisClient"]


class RedisClient(Closeable):
    """One connection to Redis/Valkey. Values move between the server and your buffers
    (bytes, bytearray, memoryview, numpy arrays of any dtype, mmap) without copies, with the
    GIL released.

    ``host`` defaults to ``$LMCACHE_RESP_HOST`` or ``localhost``, ``port`` to
    ``$LMCACHE_RESP_PORT`` or 6379, credentials to ``$LMCACHE_RESP_USERNAME`` /
    ``$LMCACHE_RESP_PASSWORD``. The constructor connects, authenticates and pings. Every call
    is bounded by ``timeout`` seconds. Safe to share between threads (calls are serialized).

    ``get_piece_bytes`` says how GETs of large values are read. ``"auto"`` (the default) decides
    by what the server says it is: servers that copy big replies before writing them (Redis up
    to 8.4, Valkey up to 8.1) have a big-reply cliff, so a GET into a buffer larger than 1 MiB
    reads the value in 1 MiB pieces, checked with WATCH/EXEC so that a value replaced mid-read
    is never returned mixed; Valkey 9 and Redis 8.6 write replies without that copy and get
    whole GETs. A number of bytes sets the piece size for every server (0: whole GETs).

    TLS, with redis-py's names: ``url="rediss://..."`` or ``ssl=True``; ``ssl_ca_certs``,
    ``ssl_ca_path``, ``ssl_certfile``/``ssl_keyfile`` (mutual TLS), ``ssl_check_hostname``,
    ``ssl_server_name`` and ``ssl_cert_reqs`` (see :class:`~lmcache_resp.settings.RespSettings`).

    ``key_prefix`` keeps every key in a namespace (``<key_prefix>@<key>`` on the wire, as
    LMCache's valkey adapter writes it); ``ttl_seconds`` makes every SET expire its key.
    """

    __slots__ = ("_native", "_settings", "__weakref__")

    def __init__(
        self,
        host: str | None = None,
        port: int | None = None,
        *,
        username: str | None = None,
        password: str | Secret | None = None,
        db: int | None = None,
        timeout: float | None = None,
        unix_path: str | None = None,
        url: str | None = None,
        connect_timeout: float | None = None,
        get_piece_bytes: int | Literal["auto"] | None = None,
        ssl: bool | None = None,
        ssl_ca_certs: str | os.PathLike[str] | None = None,
        ssl_ca_path: str | os.PathLike[str] | None = None,
        ssl_certfile: str | os.PathLike[str] | None = None,
        ssl_keyfile: str | os.PathLike[str] | None = None,
        ssl_check_hostname: bool | None = None,
        ssl_cert_reqs: str | int | None = None,
        ssl_server_name: str | None = None,
        key_prefix: str | None = None,
        ttl_seconds: int | None = None,
    ) -> None:
        self._settings = RespSettings.resolve(
            url, host=host, port=port, unix_path=unix_path, username=username, password=password, db=db,
            timeout=timeout, connect_timeout=connect_timeout, get_piece_bytes=get_piece_bytes,
            ssl=ssl, ssl_ca_certs=ssl_ca_certs, ssl_ca_path=ssl_ca_path, ssl_certfile=ssl_certfile,
            ssl_keyfile=ssl_keyfile, ssl_check_hostname=ssl_check_hostname, ssl_cert_reqs=ssl_cert_reqs,
            ssl_server_name=ssl_server_name, key_prefix=key_prefix, ttl_seconds=ttl_seconds,
        )
        self._native = _native.RedisClient(self._settings)
        metrics.track(self)

    @classmethod
    def from_url(cls, url: str, **overrides: object) -> RedisClient:
        """``resp://host:port``, ``redis://[user:pass@]host:port[/db]``, ``rediss://...`` (TLS)
        or ``unix:///path/to/redis.sock``; keyword arguments override the URL."""
        return cls(url=url, **overrides)  # type: ignore[arg-type]

    @property
    def settings(self) -> RespSettings:
        return self._settings

    def set(self, key: str | bytes, buffer: Buffer) -> None:
        """Stores the bytes of ``buffer`` (its length in bytes, whatever its dtype) under ``key``."""
        self._native.set(key, buffer)

    def get(self, key: str | bytes, buffer: Buffer) -> int | None:
        """Receives the value of ``key`` into ``buffer``: the number of bytes written, or None
        when the key does not exist (``buffer`` untouched). Raises ValueTooLargeError when the
        value does not fit (``buffer`` untouched, connection still usable)."""
        return self._native.get(key, buffer)

    def exists(self, key: str | bytes) -> bool:
        return self._native.exists(key)

    def delete(self, key: str | bytes) -> bool:
        """Deletes ``key``; True if it existed."""
        return self._native.delete(key)

    def ping(self) -> None:
        self._native.ping()

    def close(self) -> None:
        """Closes the connection; idempotent. Later calls raise ClosedError."""
        self._native.close()

    @property
    def closed(self) -> bool:
        return self._native.closed

    def stats(self) -> Stats:
        """The client's counters (each call is a one-key batch): docs/observability.md."""
        return Stats(self._native.stats())


    def __repr__(self) -> str:
        s = getattr(self, "_settings", None)
        if s is None:
            return "RedisClient(<not configured>)"
        user = f", username={s.username!r}" if s.username else ""
        secret = ", password=***" if s.password is not None else ""
        tls = ", tls" if s.ssl else ""
        native = getattr(self, "_native", None)
        state = ", closed" if native is None or native.closed else ""
        return f"RedisClient({s.endpoint!r}, db={s.db}{user}{secret}{tls}, timeout={s.timeout}{state})"
