"""The server a run talks to (a throwaway local redis-server, or the user's, never flushed) and
the keys the run writes there. The throwaway servers (one, shards, a cluster) are
lmcache_resp_servers', started with the benchmark's defaults (I/O threads by the cores, a
cluster node timeout that large values cannot trip) and stopped, their files removed, when the
run ends.

Every key a run writes is under one unique prefix, and is registered in the KeyLedger before it
is written: the run's ``finally`` deletes them all (DEL of a key that is gone is harmless).
"""

from __future__ import annotations

import functools
import os
import select
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from lmcache_resp import RedisClient, RespConnector, RespSettings, _native
from lmcache_resp.errors import InvalidInputError, RespError, RespTimeoutError
from lmcache_resp.bench.errors import BenchError
from lmcache_resp.bench.options import Options
from lmcache_resp.bench.console import Console
from lmcache_resp_servers import (
    EXIT_MISSING,
    KEEP_FREED_MALLOC_CONF,
    LaunchError,
    RedisCluster,
    RedisServer,
    server_binary,
    server_malloc,
    wait_for_replicas,
)

__all__ = [
    "KeyLedger",
    "Target",
    "open_target",
    "peer_target",
    "recommended_io_threads",
    "redis_py_tls_kwargs",
    "regime_note",
    "tls_kwargs",
]

# How long deleting a run's keys may take beyond the per-key timeout.
DELETE_GRACE_S = 30.0
# A throwaway cluster node that is busy moving large values must not be taken for dead: twice
# the tests' timeout, and the benchmark kills no nodes.
BENCH_NODE_TIMEOUT_MS = 2000


def recommended_io_threads(cpus: int | None = None) -> int:
    """Redis's own guidance: I/O threads help from 4 cores on; leave cores to the clients."""
    cpus = cpus or os.cpu_count() or 1
    if cpus < 4:
        return 1
    return min(8, cpus // 4 + 1)


def _io_threads(options: Options) -> int:
    """The throwaway servers' I/O threads: --io-threads, else Redis's guidance for this host."""
    return recommended_io_threads() if options.io_threads is None else options.io_threads


@dataclass(frozen=True)
class Target:
    settings: RespSettings
    embedded: bool
    server_version: str | None = None
    io_threads: int | None = None
    # A throwaway server's binary ("redis-server", "valkey-server"), the allocator it is built
    # with ("jemalloc-5.3.0", "libc") and its memory regime ("fresh", "steady"); None for a
    # server of the user's.
    server_name: str | None = None
    malloc: str | None = None
    regime: str | None = None
    # Starts a single throwaway server again, empty, on its port: for memory that its allocator
    # keeps and MEMORY PURGE cannot reach. None for clusters, shards and a server of the user's.
    restart: Callable[[], None] | None = field(default=None, compare=False, repr=False)
    # Waits until what was just written can be read where reads go: a throwaway cluster's replicas
    # caught up, when reads go to them; False when they had not by the end of the wait. None where
    # reads see writes at once.
    settle: Callable[[], bool] | None = field(default=None, compare=False, repr=False)

    @property
    def endpoint(self) -> str:
        return self.settings.endpoint

    @property
    def servers(self) -> int:
        return len(self.settings.endpoints)

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for PagedRespStore/RedisClient. Empty credentials rather than None:
        None would let $LMCACHE_RESP_* apply a second time (and AUTH against a server that
        has no password)."""
        s = self.settings
        where: dict[str, Any]
        if self.servers > 1 or s.cluster:
            where = {"url": "redis://" + ",".join(s.endpoints), "cluster": s.cluster}
            if s.cluster:
                where["read_from"] = s.read_from
        elif s.unix_path is not None:
            where = {"unix_path": s.unix_path}
        else:
            where = {"host": s.host, "port": s.port}
        return {
            **where,
            "username": s.username or "",
            "password": s.password if s.password is not None else "",
            "db": s.db,
            "timeout": s.timeout,
            **tls_kwargs(s),
        }

    def describe(self) -> dict[str, Any]:
        """For the JSON report: where, what, never the password."""
        return {
            "embedded": self.embedded,
            "tls": self.settings.ssl,
            "endpoint": self.endpoint,
            "endpoints": self.settings.endpoints,
            "cluster": self.settings.cluster,
            "read_from": self.settings.read_from,
            "version": self.server_version,
            "name": self.server_name,
            "malloc": self.malloc,
            "regime": self.regime,
            "io_threads": self.io_threads,
            "io_loop": self.io_loop,
            "username": self.settings.username,
            "db": self.settings.db,
        }


    @cached_property
    def io_loop(self) -> dict[str, str]:
        """Which loop lmcache_resp's I/O workers run in this run, and why (``{"loop", "setting",
        "why"}``), as an engine started here with the run's settings chooses it: every store and
        connector of the run has the same setting on the same host (LMCache's process under
        --compare lmcache-l2 is handed it in its adapter params)."""
        try:
            # resolve(): empty credentials are none, as for our store (not LMCache's "not set").
            probe = _native.Connector(RespSettings.resolve(**self.connect_kwargs(), num_workers=1))
        except RespError as exc:
            raise BenchError(f"cannot use the server at {self.endpoint}: {exc}") from None
        try:
            chosen = probe.placement["io_loop"]
        finally:
            probe.close()
        return {str(k): str(v) for k, v in chosen.items()}

    def io_loop_line(self) -> str:
        """lmcache_resp's I/O loop, for the head of the report, beside the server."""
        chosen = self.io_loop
        return f"lmcache_resp I/O loop: {chosen['loop']} ({chosen['why']})"

    def header_line(self) -> str:
        """The server, for the head of the report: name, version, allocator and memory regime."""
        if not self.embedded:
            return (f"server: yours at {self.endpoint} (its version, allocator and memory regime are its own; "
                    "--regime is for servers this run starts)")
        replicas = f" (reads: {self.settings.read_from})" if self.settings.cluster else ""
        many = (f"a cluster of {self.servers} nodes{replicas}, " if self.settings.cluster
                else f"{self.servers} independent servers, " if self.servers > 1 else "")
        return (f"server: {many}{self.server_name} {self.server_version}, malloc={self.malloc}, "
                f"io-threads {self.io_threads}; regime {self.regime}: {regime_note(self.regime, self.malloc)}")


def regime_note(regime: str | None, malloc: str | None) -> str:
    """What a throwaway server's memory regime means, in a few words."""
    if regime == "fresh":
        return ("the server as started: it hands memory it frees back to the kernel, so new big values "
                "fault in fresh pages")
    how = (f"jemalloc preloaded with MALLOC_CONF={KEEP_FREED_MALLOC_CONF}: a production Valkey is built with "
           "jemalloc, this binary with libc's malloc" if malloc == "libc" else f"MALLOC_CONF={KEEP_FREED_MALLOC_CONF}")
    return f"the server keeps the memory it frees, as a full production cache does ({how}); an untimed warm-up goes first"


def tls_kwargs(settings: RespSettings) -> dict[str, Any]:
    """The resolved TLS settings as keywords in redis-py's names, for another front or a peer
    (files by path: never their contents); empty without TLS."""
    if not settings.ssl:
        return {}
    given = {
        "ssl_ca_certs": settings.ssl_ca_certs, "ssl_ca_path": settings.ssl_ca_path,
        "ssl_certfile": settings.ssl_certfile, "ssl_keyfile": settings.ssl_keyfile,
        "ssl_server_name": settings.ssl_server_name,
    }
    return {
        "ssl": True, **{name: value for name, value in given.items() if value is not None},
        "ssl_cert_reqs": settings.ssl_cert_reqs, "ssl_check_hostname": settings.ssl_check_hostname,
    }


def redis_py_tls_kwargs(settings: RespSettings) -> dict[str, Any]:
    """:func:`tls_kwargs` as redis-py's SSL connections take them: the connection class says
    TLS, and redis-py has no server-name override."""
    return {name: value for name, value in tls_kwargs(settings).items() if name not in ("ssl", "ssl_server_name")}


class KeyLedger:
    def __init__(self) -> None:
        self.prefix = f"lmcache-resp-bench:{uuid.uuid4()}:"
        self._keys: dict[str, None] = {}  # an ordered set

    def keys(self, owner: str, count: int) -> list[str]:
        """``count`` key names for ``owner``, registered for deletion before anything is written."""
        names = [f"{self.prefix}{owner}:{i}" for i in range(count)]
        self._keys.update(dict.fromkeys(names))
        return names

    def register(self, names: list[str]) -> None:
        """Full key names a peer chose itself (LMCache's connector names its keys), registered
        before they are written."""
        if not all(name.startswith(self.prefix) for name in names):
            raise ValueError("a peer's keys must carry the run's prefix")
        self._keys.update(dict.fromkeys(names))

    def key(self, name: str) -> str:
        full = f"{self.prefix}{name}"
        self._keys[full] = None
        return full

    def delete_all(self, target: Target) -> None:
        """Deletes every registered key through a fresh connection (the run's own clients may be
        broken by whatever ended it)."""
        if not self._keys:
            return
        if target.servers > 1 or target.settings.cluster:
            # Routed like the run's own keys: each DEL goes to the server that holds the key. The
            # batch must complete before the connector closes: closing drops what is in flight.
            with RespConnector.from_settings(target.settings) as connector:
                batch = connector.submit_batch_delete(list(self._keys))
                _wait_for_batch(connector, batch, target.settings.timeout + DELETE_GRACE_S)
        else:
            with RedisClient(**target.connect_kwargs()) as client:
                for key in self._keys:
                    client.delete(key)
        self._keys.clear()


def _wait_for_batch(connector: RespConnector, batch: int, timeout: float) -> None:
    """Until ``batch`` completes (its failure raised), at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        for result in connector.drain():
            if result.id == batch:
                result.check("deleting the run's keys")
                return
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RespTimeoutError(f"deleting the run's keys did not finish within {timeout:g} s")
        select.select([connector.event_fd()], [], [], remaining)


def _resolve(url: str | None = None, **connection: Any) -> RespSettings:
    try:
        return RespSettings.resolve(url, **connection)
    except InvalidInputError as exc:
        raise BenchError(str(exc)) from None


def _not_started(what: str, exc: RuntimeError) -> BenchError:
    missing = isinstance(exc, LaunchError) and exc.exit_code == EXIT_MISSING
    return BenchError(f"could not start {what}: {exc}{' (or pass --host/--port of a running server)' if missing else ''}")


@contextmanager
def open_target(options: Options, console: Console, key_prefix: str) -> Iterator[Target]:
    if options.embedded:
        with _embedded(options, console) as target:
            yield target
        return
    reads = {"read_from": options.read_from} if options.read_from else {}
    settings = _resolve(options.url, host=options.host, port=options.port, username=options.username,
                        password=options.password, timeout=options.timeout, **reads)
    console.say(
        f"using the redis server at {settings.endpoint}: not flushed; every key this run writes is under "
        f"{key_prefix!r} and is deleted afterwards"
    )
    yield Target(settings, embedded=False)


@contextmanager
def _embedded(options: Options, console: Console) -> Iterator[Target]:
    if options.cluster or options.shards:
        with _embedded_many(options, console) as target:
            yield target
        return
    name = _server_name(options)
    try:
        server = RedisServer(io_threads=_io_threads(options), unix_socket=options.unix, server=options.server,
                             tls=options.tls, keep_freed_memory=options.keeps_freed_memory)
    except RuntimeError as exc:
        raise _not_started(f"a throwaway {name}", exc) from None
    try:
        version = server.version()
        where = f"{server.host}:{server.port}" + (f" and {server.unix_path}" if server.unix_path else "")
        tls = f", TLS only, certificates of a test CA in {server.certs.directory}" if server.certs else ""
        console.say(
            f"started a throwaway {name} {version} on {where} "
            f"(no persistence, io-threads {server.io_threads}{tls}); it is stopped at the end"
        )
        if server.certs is not None:
            settings = _resolve(host=server.host, port=server.port, username="", password="", timeout=options.timeout,
                                ssl=True, ssl_ca_certs=str(server.certs.ca))
        elif server.unix_path is not None:
            settings = _resolve(unix_path=server.unix_path, username="", password="", timeout=options.timeout)
        else:
            settings = _resolve(host=server.host, port=server.port, username="", password="", timeout=options.timeout)
        yield Target(settings, embedded=True, server_version=version, io_threads=server.io_threads, server_name=name,
                     malloc=server.malloc(), regime=options.regime, restart=server.restart)
    finally:
        port = server.port
        server.stop()
        console.say(f"stopped the throwaway {name} on 127.0.0.1:{port}")


def _start_shards(count: int, options: Options) -> list[RedisServer]:
    """``count`` independent throwaway servers (static sharding): all of them started, or none."""
    shards: list[RedisServer] = []
    try:
        for _ in range(count):
            shards.append(RedisServer(io_threads=_io_threads(options), server=options.server,
                                      keep_freed_memory=options.keeps_freed_memory))
    except BaseException:
        for shard in shards:
            shard.stop()
        raise
    return shards


@contextmanager
def _embedded_many(options: Options, console: Console) -> Iterator[Target]:
    kind = options.server
    what = (
        f"a throwaway {'Valkey' if kind in ('valkey', 'valkey9') else 'Redis'} Cluster of {options.cluster} primaries"
        + (f" with {options.replicas} replicas each" if options.replicas else "")
        if options.cluster else f"{options.shards} throwaway independent {_server_name(options)}s"
    )
    cluster: RedisCluster | None = None
    shards: list[RedisServer] = []
    try:
        if options.cluster:
            cluster = RedisCluster(primaries=options.cluster, replicas=options.replicas, io_threads=_io_threads(options),
                                   node_timeout_ms=BENCH_NODE_TIMEOUT_MS, server=kind,
                                   keep_freed_memory=options.keeps_freed_memory)
        else:
            shards = _start_shards(options.shards, options)
    except RuntimeError as exc:
        raise _not_started(what, exc) from None
    try:
        endpoints = cluster.endpoints if cluster is not None else [f"{s.host}:{s.port}" for s in shards]
        version = cluster.version() if cluster is not None else shards[0].version()
        io_threads = _io_threads(options)
        console.say(
            f"started {what} ({version}) on {', '.join(endpoints)} (no persistence, "
            f"io-threads {io_threads} each); stopped at the end"
        )
        url = "redis://" + ",".join(endpoints)
        reads = {"read_from": options.read_from} if options.cluster and options.read_from else {}
        settings = _resolve(url, username="", password="", timeout=options.timeout, cluster=bool(options.cluster),
                            **reads)
        settle = None
        if cluster is not None and options.replicas and options.read_from == "prefer_replica":
            ports = [node.port for node in cluster.nodes]
            # Until every replica has what its primary had when called (replication is
            # asynchronous); False when one had not caught up within 10 s.
            settle = functools.partial(wait_for_replicas, ports)
        yield Target(settings, embedded=True, server_version=version, io_threads=io_threads,
                     server_name=_server_name(options), malloc=server_malloc(server_binary(kind)),
                     regime=options.regime, settle=settle)
    finally:
        if cluster is not None:
            cluster.stop()
        for shard in shards:
            shard.stop()
        console.say(f"stopped {what.replace('a throwaway', 'the throwaway')}")


def _server_name(options: Options) -> str:
    """What the throwaway server is called in the run's output."""
    return {"redis": "redis-server", "valkey": "valkey-server", "valkey9": "valkey-server"}.get(
        options.server, os.path.basename(options.server)
    )


@contextmanager
def peer_target(options: Options, target: Target, console: Console) -> Iterator[Target]:
    """Where the peers run: the same server as ours, or, when ours spans several servers, one
    throwaway server of its own (the peers reach one server: LMCache's connector, redis-py's
    client and redis-benchmark speak to one host:port). Same total workload, one server."""
    if target.servers == 1 and not target.settings.cluster:
        yield target
        return
    name = _server_name(options)
    try:
        server = RedisServer(io_threads=_io_threads(options), server=options.server,
                             keep_freed_memory=options.keeps_freed_memory)
    except RuntimeError as exc:
        raise _not_started(f"the peers' throwaway {name}", exc) from None
    try:
        console.say(f"the peers get a throwaway {name} of their own on {server.host}:{server.port} (one server, "
                    f"regime {options.regime})")
        settings = _resolve(host=server.host, port=server.port, username="", password="", timeout=options.timeout)
        yield Target(settings, embedded=True, server_version=server.version(), io_threads=server.io_threads,
                     server_name=name, malloc=server.malloc(), regime=options.regime)
    finally:
        server.stop()
