"""A throwaway local redis-server for the benchmark and the demo: a free port, a temp dir,
no persistence, stopped (and its files removed) on exit."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from types import TracebackType

__all__ = ["EmbeddedRedis", "recommended_io_threads"]


def recommended_io_threads(cpus: int | None = None) -> int:
    """Redis's own guidance: I/O threads help from 4 cores on; leave cores to the clients."""
    cpus = cpus or os.cpu_count() or 1
    if cpus < 4:
        return 1
    return min(8, cpus // 4 + 1)


class EmbeddedRedis:
    """``with EmbeddedRedis() as server: ... server.host, server.port``."""

    def __init__(self, *, io_threads: int | None = None, executable: str = "redis-server") -> None:
        self.io_threads = recommended_io_threads() if io_threads is None else io_threads
        self.executable = executable
        self.host = "127.0.0.1"
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._directory: tempfile.TemporaryDirectory[str] | None = None

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
        return args

    def start(self) -> EmbeddedRedis:
        if shutil.which(self.executable) is None:
            raise RuntimeError(
                f"{self.executable} not found: install Debian's package 'redis-server' "
                "(apt-get install -y redis-server) or pass --host/--port of a running server"
            )
        self._directory = tempfile.TemporaryDirectory(prefix="lmcache-resp-redis-")
        for _attempt in range(5):
            with socket.socket() as sock:
                sock.bind((self.host, 0))
                self.port = int(sock.getsockname()[1])
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
