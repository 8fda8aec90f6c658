"""The server a run talks to (a throwaway local redis-server, or the user's, never flushed) and
the keys the run writes there.

Every key a run writes is under one unique prefix, and is registered in the KeyLedger before it
is written: the run's ``finally`` deletes them all (DEL of a key that is gone is harmless).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from lmcache_resp import RedisClient, RespSettings
from lmcache_resp.embedded import EmbeddedRedis
from lmcache_resp.errors import InvalidInputError
from lmcache_resp.bench.cli import BenchError, Options
from lmcache_resp.bench.console import Console

__all__ = ["KeyLedger", "Target", "open_target"]


@dataclass(frozen=True)
class Target:
    settings: RespSettings
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


class KeyLedger:
    def __init__(self) -> None:
        self.prefix = f"lmcache-resp-bench:{uuid.uuid4()}:"
        self._keys: dict[str, None] = {}  # an ordered set

    def keys(self, owner: str, count: int) -> list[str]:
        """``count`` key names for ``owner``, registered for deletion before anything is written."""
        names = [f"{self.prefix}{owner}:{i}" for i in range(count)]
        self._keys.update(dict.fromkeys(names))
        return names

    def key(self, name: str) -> str:
        full = f"{self.prefix}{name}"
        self._keys[full] = None
        return full

    def delete_all(self, target: Target) -> None:
        """Deletes every registered key through a fresh connection (the run's own clients may be
        broken by whatever ended it)."""
        if not self._keys:
            return
        with RedisClient(**target.connect_kwargs()) as client:
            for key in self._keys:
                client.delete(key)
        self._keys.clear()


def _resolve(url: str | None = None, **connection: Any) -> RespSettings:
    try:
        return RespSettings.resolve(url, **connection)
    except InvalidInputError as exc:
        raise BenchError(str(exc)) from None


@contextmanager
def open_target(options: Options, console: Console, key_prefix: str) -> Iterator[Target]:
    if options.embedded:
        with _embedded(options, console) as target:
            yield target
        return
    settings = _resolve(options.url, host=options.host, port=options.port, username=options.username,
                        password=options.password, timeout=options.timeout)
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
        settings = _resolve(host=server.host, port=server.port, username="", password="", timeout=options.timeout)
        yield Target(settings, embedded=True, server_version=version, io_threads=server.io_threads)
    finally:
        port = server.port
        server.stop()
        console.say(f"stopped the throwaway redis-server on 127.0.0.1:{port}")
