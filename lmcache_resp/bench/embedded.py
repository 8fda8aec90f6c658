"""Throwaway local Redis for the benchmark: one redis-server, several independent ones (static
sharding), or a Redis Cluster; free ports, temp dirs, no persistence, stopped (and their files
removed) on exit.

Context-manager faces of the benchmark's launcher (:mod:`lmcache_resp.bench.servers`, on which
the test suites' fixtures build too), with the benchmark's default of I/O threads.
``keep_freed_memory=True`` starts servers that keep the memory they free (the launcher's memory
regimes)."""

from __future__ import annotations

import os
from pathlib import Path
from types import TracebackType

from lmcache_resp.bench.servers.binaries import server_binary, server_malloc, server_version
from lmcache_resp.bench.servers.cluster import RedisCluster
from lmcache_resp.bench.servers.ports import HOST
from lmcache_resp.bench.servers.replication import wait_for_replicas
from lmcache_resp.bench.servers.server import RedisServer

__all__ = ["EmbeddedCluster", "EmbeddedRedis", "EmbeddedServers", "recommended_io_threads"]

# A cluster node that is busy moving large values must not be taken for dead: twice the tests'
# timeout, and the benchmark kills no nodes.
BENCH_NODE_TIMEOUT_MS = 2000


def recommended_io_threads(cpus: int | None = None) -> int:
    """Redis's own guidance: I/O threads help from 4 cores on; leave cores to the clients."""
    cpus = cpus or os.cpu_count() or 1
    if cpus < 4:
        return 1
    return min(8, cpus // 4 + 1)


class EmbeddedRedis:
    """``with EmbeddedRedis() as server: ... server.host, server.port``."""

    def __init__(
        self,
        *,
        io_threads: int | None = None,
        executable: str = "redis-server",
        unix_socket: bool = False,
        cluster: bool = False,
        tls: bool = False,
        keep_freed_memory: bool = False,
    ) -> None:
        self.io_threads = recommended_io_threads() if io_threads is None else io_threads
        self.keep_freed_memory = keep_freed_memory
        self.executable = executable
        self.host = HOST
        self.port = 0
        self.unix_socket = unix_socket
        self.cluster = cluster
        self.tls = tls
        self._server: RedisServer | None = None

    @property
    def unix_path(self) -> str | None:
        return None if self._server is None else self._server.unix_path

    @property
    def ca_certs(self) -> Path | None:
        """The CA that signed a TLS server's certificate (made for this server), else None."""
        if self._server is None or self._server.certs is None:
            return None
        return self._server.certs.ca

    def start(self) -> EmbeddedRedis:
        self._server = RedisServer(
            io_threads=self.io_threads, unix_socket=self.unix_socket, cluster=self.cluster, server=self.executable,
            tls=self.tls, keep_freed_memory=self.keep_freed_memory,
        )
        self.port = self._server.port
        return self

    def restart(self) -> None:
        """Starts the server again, empty, on the same port (see RedisServer.restart)."""
        assert self._server is not None, "server is not started"
        self._server.restart()

    def version(self) -> str:
        if self._server is not None:
            return self._server.version()
        return server_version(server_binary(self.executable))

    def malloc(self) -> str:
        """The allocator the server binary is built with (``libc``, ``jemalloc-5.3.0``)."""
        return server_malloc(server_binary(self.executable))

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    @property
    def running(self) -> bool:
        return self._server is not None and self._server.running

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EmbeddedRedis({self.host}:{self.port}, io_threads={self.io_threads}, running={self.running})"


class EmbeddedServers:
    """``count`` independent throwaway redis-servers (static sharding)."""

    def __init__(
        self, count: int, *, io_threads: int | None = None, cluster: bool = False, server: str = "redis",
        keep_freed_memory: bool = False,
    ) -> None:
        self.servers = [EmbeddedRedis(io_threads=io_threads, cluster=cluster, executable=server,
                                      keep_freed_memory=keep_freed_memory) for _ in range(count)]

    @property
    def io_threads(self) -> int:
        return self.servers[0].io_threads

    @property
    def endpoints(self) -> list[str]:
        return [f"{s.host}:{s.port}" for s in self.servers]

    def start(self) -> EmbeddedServers:
        try:
            for server in self.servers:
                server.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for server in self.servers:
            server.stop()

    def version(self) -> str:
        return self.servers[0].version()

    def malloc(self) -> str:
        return self.servers[0].malloc()

    def __enter__(self) -> EmbeddedServers:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class EmbeddedCluster:
    """A throwaway Redis Cluster of ``primaries`` primaries (at least 3), each with ``replicas``
    replicas: the servers start with cluster mode on and ``redis-cli --cluster create`` assigns the
    slots.
    Should this process die without stopping it, a watcher stops its servers."""

    def __init__(
        self, primaries: int, *, io_threads: int | None = None, cli: str | None = None, server: str = "redis",
        keep_freed_memory: bool = False, replicas: int = 0,
    ) -> None:
        if primaries < 3:
            raise ValueError("a Redis Cluster needs at least 3 primaries")
        self.primaries = primaries
        self.replicas = replicas
        self.server = server
        self.io_threads = recommended_io_threads() if io_threads is None else io_threads
        self.cli = cli
        self.keep_freed_memory = keep_freed_memory
        self._cluster: RedisCluster | None = None

    @property
    def endpoints(self) -> list[str]:
        return [] if self._cluster is None else self._cluster.endpoints

    def start(self) -> EmbeddedCluster:
        self._cluster = RedisCluster(
            primaries=self.primaries,
            replicas=self.replicas,
            io_threads=self.io_threads,
            cli=self.cli,
            node_timeout_ms=BENCH_NODE_TIMEOUT_MS,
            server=self.server,
            keep_freed_memory=self.keep_freed_memory,
        )
        return self

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.stop()
            self._cluster = None

    def version(self) -> str:
        assert self._cluster is not None, "the cluster is not running"
        return self._cluster.version()

    def wait_for_replicas(self) -> bool:
        """Until every replica has what its primary had when called: reads from replicas then
        see what was just written (replication is asynchronous). False when one had not caught
        up within 10 s."""
        if self._cluster is not None and self.replicas:
            return wait_for_replicas([node.port for node in self._cluster.nodes])
        return True

    def malloc(self) -> str:
        return server_malloc(server_binary(self.server))

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
