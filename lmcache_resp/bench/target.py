"""The server a run talks to: a throwaway local redis-server, or the user's (never flushed)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from lmcache_resp.config import ConnectionSettings, resolve_connection
from lmcache_resp.embedded import EmbeddedRedis
from lmcache_resp.errors import InvalidInputError
from lmcache_resp.bench.console import Console
from lmcache_resp.bench.errors import BenchError
from lmcache_resp.bench.options import Options

__all__ = ["Target", "open_target"]


@dataclass(frozen=True)
class Target:
    settings: ConnectionSettings
    embedded: bool
    server_version: str | None = None
    io_threads: int | None = None

    @property
    def endpoint(self) -> str:
        return self.settings.endpoint

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for PagedRespStore/RedisClient. Empty credentials rather than None:
        None would let $LMCACHE_RESP_* apply a second time (and AUTH against a server that
        has no password)."""
        s = self.settings
        where: dict[str, Any] = {"unix_path": s.unix_path} if s.unix_path is not None else {"host": s.host, "port": s.port}
        return {
            **where,
            "username": s.username or "",
            "password": s.password if s.password is not None else "",
            "db": s.db,
            "timeout": s.timeout,
        }

    def describe(self) -> dict[str, Any]:
        """For the JSON report: where, what, never the password."""
        return {
            "embedded": self.embedded,
            "endpoint": self.endpoint,
            "version": self.server_version,
            "io_threads": self.io_threads,
            "username": self.settings.username,
            "db": self.settings.db,
        }


@contextmanager
def open_target(options: Options, console: Console, key_prefix: str) -> Iterator[Target]:
    if options.embedded:
        with _embedded(options, console) as target:
            yield target
        return
    try:
        settings = resolve_connection(
            options.host, options.port, url=options.url, username=options.username,
            password=options.password, timeout=options.timeout,
        )
    except InvalidInputError as exc:
        raise BenchError(str(exc)) from None
    console.say(
        f"using the redis server at {settings.endpoint}: not flushed; every key this run writes is under "
        f"{key_prefix!r} and is deleted afterwards"
    )
    yield Target(settings, embedded=False)


@contextmanager
def _embedded(options: Options, console: Console) -> Iterator[Target]:
    server = EmbeddedRedis(io_threads=options.io_threads)
    try:
        server.start()
    except RuntimeError as exc:
        raise BenchError(f"could not start a throwaway redis-server: {exc}") from None
    try:
        version = server.version()
        console.say(
            f"started a throwaway redis-server {version} on {server.host}:{server.port} "
            f"(no persistence, io-threads {server.io_threads}); it is stopped at the end"
        )
        settings = resolve_connection(server.host, server.port, username="", password="", timeout=options.timeout)
        yield Target(settings, embedded=True, server_version=version, io_threads=server.io_threads)
    finally:
        port = server.port
        server.stop()
        console.say(f"stopped the throwaway redis-server on 127.0.0.1:{port}")
