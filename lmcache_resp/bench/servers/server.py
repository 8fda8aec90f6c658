"""One throwaway server (RedisServer): DIR/redis.conf written, the server binary started on it
on a free port, and waited for until it answers ``INFO server`` as that very process (another
process may hold the port for a moment). Options: a password, a Unix socket, I/O threads, extra
config lines, cluster mode, the binary (``--server``), TLS only on certificates made for it, and
the memory regime. The tests' RedisServer (lmcache_resp_testing.servers) extends it."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from lmcache_resp.bench.servers import processes
from lmcache_resp.bench.servers.certs import ServerCerts, make_server_certs
from lmcache_resp.bench.servers.config import ServerConfig
from lmcache_resp.bench.servers.errors import EXIT_PORT_TAKEN, LaunchError
from lmcache_resp.bench.servers.memory import check_keeps_freed_memory, keep_freed_memory_env
from lmcache_resp.bench.servers.ports import HOST, free_cluster_base, free_port

__all__ = ["RedisServer"]


class RedisServer(processes.Throwaway):
    """A throwaway server, started on construction: ``RedisServer(directory)`` (or no directory:
    a temp dir of its own, removed by :meth:`stop`), then ``.port``, ``.unix_path``. Options:
    ``password`` (requirepass), ``unix_socket``, ``io_threads``, ``conf`` (extra config lines),
    ``cluster`` (cluster mode, on a port whose bus port is free), ``server`` (see
    :func:`server_binary`), ``keep_freed_memory`` (the server keeps the memory it frees: see
    :mod:`~lmcache_resp.bench.servers.memory`), ``tls=True`` (TLS only, on certificates made in DIR/certs: ``.certs``) or
    ``tls=certs`` (a ServerCerts). (A subclass sets what its ``_config`` reads before calling this
    constructor, which starts the server.)"""

    certs: ServerCerts | None

    def __init__(
        self,
        directory: Path | str | None = None,
        *,
        password: str | None = None,
        unix_socket: bool = False,
        io_threads: int | None = None,
        conf: Sequence[str] = (),
        cluster: bool = False,
        server: str | None = None,
        tls: bool | ServerCerts = False,
        keep_freed_memory: bool = False,
    ) -> None:
        super().__init__(server, directory, "lmcache-resp-redis-")
        self.keep_freed_memory = keep_freed_memory
        self.allocator_env = keep_freed_memory_env(self.binary) if keep_freed_memory else {}
        try:
            self.certs = tls if isinstance(tls, ServerCerts) else self._make_certs(self.directory / "certs") if tls else None
        except BaseException:
            self._remove_temp_dir()
            raise
        self.password = password
        self.unix_socket = unix_socket
        self.io_threads = io_threads
        self.conf = tuple(conf)
        self.cluster = cluster
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        try:
            self._start_on_a_free_port()
        except BaseException:
            self._remove_temp_dir()
            raise

    def _make_certs(self, directory: Path) -> ServerCerts:
        """The certificates ``tls=True`` makes."""
        return make_server_certs(directory)

    def _config(self) -> ServerConfig:
        return ServerConfig(
            self.directory, self.port, password=self.password, unix_socket=self.unix_socket,
            io_threads=self.io_threads, cluster_node_timeout_ms=2000 if self.cluster else None, extra=self.conf,
            tls=self.certs,
        )

    def _start_on_a_free_port(self) -> None:
        for attempt in range(5):
            self.port = free_cluster_base(1) if self.cluster else free_port()
            try:
                self._spawn()
                return
            except LaunchError as exc:
                if exc.exit_code != EXIT_PORT_TAKEN or attempt == 4:
                    raise

    def _spawn(self) -> None:
        config = self._config()
        process = processes.spawn(self.binary, config, own_session=False, allocator=self.allocator_env)
        processes.wait_answering(process, config, time.monotonic() + 10)
        if self.keep_freed_memory:
            try:
                check_keeps_freed_memory(process.pid, config, self.allocator_env)
            except LaunchError:
                processes.kill(process)
                raise
        self.process = process

    @property
    def host(self) -> str:
        return HOST

    @property
    def pid(self) -> int:
        assert self.process is not None, "server is not running"
        return self.process.pid

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def unix_path(self) -> str | None:
        path = self._config().unix_path
        return None if path is None else str(path)

    def kill(self) -> None:
        """SIGKILL (no goodbye to clients), and wait until it is gone."""
        if self.process is not None:
            processes.kill(self.process)
            self.process = None

    def restart(self) -> None:
        """Kills the server and starts it again on the same port and settings, empty (no
        persistence): what hands back memory that its allocator keeps and MEMORY PURGE cannot
        reach (jemalloc preloaded into a libc-malloc build)."""
        self.kill()
        deadline = time.monotonic() + 10
        while True:
            try:
                self._spawn()
                return
            except LaunchError as exc:
                # The port is ours; only a socket still closing can hold it, and only briefly.
                if exc.exit_code != EXIT_PORT_TAKEN or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def stop(self) -> None:
        """Kills the server and removes the temp dir it made (a given directory stays)."""
        self.kill()
        super().stop()

    def __repr__(self) -> str:
        tls = ", tls" if self.certs is not None else ""
        return f"{type(self).__name__}({HOST}:{self.port}, {os.path.basename(self.binary)}{tls}, running={self.running})"


