"""Throwaway local Redis for the benchmark and the demo: one redis-server, several independent
ones (static sharding), or a Redis Cluster; free ports, temp dirs, no persistence, stopped
(and their files removed) on exit."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from types import TracebackType

__all__ = ["EmbeddedCluster", "EmbeddedRedis", "EmbeddedServers", "recommended_io_threads"]


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
    ) -> None:
        self.io_threads = recommended_io_threads() if io_threads is None else io_threads
        self.executable = executable
        self.host = "127.0.0.1"
        self.port = 0
        self.unix_socket = unix_socket
        self.cluster = cluster
        self._process: subprocess.Popen[bytes] | None = None
        self._directory: tempfile.TemporaryDirectory[str] | None = None

    @property
    def unix_path(self) -> str | None:
        if not self.unix_socket or self._directory is None:
            return None
        return os.path.join(self._directory.name, "redis.sock")

    @property
    def args(self) -> list[str]:
        assert self._directory is not None
        directory = self._directory.name
        args = [
            self.executable, "--port", str(self.port), "--bind", self.host, "--save", "", "--appendonly", "no",
            "--dir", directory, "--logfile", os.path.join(directory, "redis.log"), "--protected-mode", "no",
        ]
        if self.io_threads > 1:
            args += ["--io-threads", str(self.io_threads), "--io-threads-do-reads", "yes"]
        if self.unix_socket:
            args += ["--unixsocket", os.path.join(directory, "redis.sock"), "--unixsocketperm", "700"]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", os.path.join(directory, "nodes.conf"),
                     "--cluster-node-timeout", "2000"]
        return args

    def start(self) -> EmbeddedRedis:
        if shutil.which(self.executable) is None:
            raise RuntimeError(
                f"{self.executable} not found: install Debian's package 'redis-server' "
                "(apt-get install -y redis-server) or pass --host/--port of a running server"
            )
        self._directory = tempfile.TemporaryDirectory(prefix="lmcache-resp-redis-")
        for _attempt in range(5):
            self.port = _free_port(self.host, bus=self.cluster)
            self._process = subprocess.Popen(self.args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if self._wait_ready():
                return self
        raise RuntimeError(f"redis-server did not start: {self._log_tail()}")

    def _wait_ready(self) -> bool:
        assert self._process is not None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False
            try:
                with socket.create_connection((self.host, self.port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return True
            except OSError:
                time.sleep(0.02)
        return False

    def _log_tail(self) -> str:
        if self._directory is None:
            return ""
        path = os.path.join(self._directory.name, "redis.log")
        try:
            with open(path, errors="replace") as log:
                return log.read()[-2000:]
        except OSError:
            return ""

    def version(self) -> str:
        out = subprocess.run([self.executable, "--version"], capture_output=True, text=True, check=False).stdout
        for part in out.split():
            if part.startswith("v="):
                return part[2:]
        return out.strip()

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        if self._directory is not None:
            self._directory.cleanup()
            self._directory = None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"EmbeddedRedis({self.host}:{self.port}, io_threads={self.io_threads}, running={self.running})"


def _free_port(host: str, *, bus: bool = False) -> int:
    """A free port (and, for a cluster node, its bus port +10000 too), below the ephemeral range
    for cluster nodes so that the bus port exists."""
    for _ in range(100):
        with socket.socket() as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if not bus:
            return port
        port = 20000 + port % 20000
        try:
            for candidate in (port, port + 10000):
                with socket.socket() as sock:
                    sock.bind((host, candidate))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port")


class EmbeddedServers:
    """``count`` independent throwaway redis-servers (static sharding)."""

    def __init__(self, count: int, *, io_threads: int | None = None, cluster: bool = False) -> None:
        self.servers = [EmbeddedRedis(io_threads=io_threads, cluster=cluster) for _ in range(count)]

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

    def __enter__(self) -> EmbeddedServers:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class EmbeddedCluster(EmbeddedServers):
    """A throwaway Redis Cluster of ``primaries`` primaries (at least 3), no replicas: the
    servers start with cluster mode on and ``redis-cli --cluster create`` assigns the slots."""

    def __init__(self, primaries: int, *, io_threads: int | None = None, cli: str = "redis-cli") -> None:
        if primaries < 3:
            raise ValueError("a Redis Cluster needs at least 3 primaries")
        super().__init__(primaries, io_threads=io_threads, cluster=True)
        self.cli = cli

    def start(self) -> EmbeddedCluster:
        super().start()
        try:
            if shutil.which(self.cli) is None:
                raise RuntimeError(f"{self.cli} not found: install Debian's package 'redis-tools'")
            created = subprocess.run(
                [self.cli, "--cluster", "create", *self.endpoints, "--cluster-replicas", "0", "--cluster-yes"],
                capture_output=True, text=True, timeout=60, check=False,
            )
            if created.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout[-1000:]} {created.stderr[-1000:]}")
            self._wait_ok()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ok(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = [
                subprocess.run([self.cli, "-p", str(s.port), "CLUSTER", "INFO"], capture_output=True, text=True,
                               check=False).stdout
                for s in self.servers
            ]
            if all("cluster_state:ok" in state and "cluster_slots_assigned:16384" in state for state in states):
                return
            time.sleep(0.1)
        raise RuntimeError("the throwaway cluster did not reach cluster_state:ok within 30 s")
