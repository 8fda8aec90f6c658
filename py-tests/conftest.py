"""A real, throwaway redis-server per test: a free port, a temp dir, no persistence.

Started through native-tests/redis-test-server.sh, the same script the Rust tests use.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SERVER_SCRIPT = REPO / "native-tests" / "redis-test-server.sh"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    def __init__(
        self,
        directory: Path,
        *,
        password: str | None = None,
        acl_user: tuple[str, str] | None = None,
        unix_socket: bool = False,
        conf: tuple[str, ...] = (),
    ) -> None:
        self.directory = directory
        self.conf = conf
        self.password = password
        self.acl_user = acl_user
        self.unix_path = str(directory / "redis.sock") if unix_socket else None
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        for attempt in range(5):
            self.port = free_port()
            try:
                self._spawn()
                return
            except RuntimeError as exc:
                if "Address already in use" not in str(exc) or attempt == 4:
                    raise

    def _spawn(self) -> None:
        args = ["bash", str(SERVER_SCRIPT), str(self.directory), str(self.port)]
        if self.password:
            args += ["--password", self.password]
        if self.acl_user:
            args += ["--acl-user", f"{self.acl_user[0]}:{self.acl_user[1]}"]
        if self.unix_path:
            args += ["--unix-socket", self.unix_path]
        for line in self.conf:
            args += ["--conf", line]
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while True:
            if process.poll() is not None:
                stderr = process.stderr.read().decode(errors="replace") if process.stderr else ""
                log_file = self.directory / "redis.log"
                log = log_file.read_text(errors="replace") if log_file.exists() else ""
                raise RuntimeError(f"redis-server did not start (exit {process.returncode}):\n{stderr}\n{log}")
            if self._answers_ping():
                self.process = process
                return
            if time.monotonic() > deadline:
                process.kill()
                raise RuntimeError("redis-server did not answer PING within 10 s")
            time.sleep(0.01)

    def _answers_ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return bool(sock.recv(64))
        except OSError:
            return False

    @property
    def pid(self) -> int:
        assert self.process is not None, "server is not running"
        return self.process.pid

    def kill(self) -> None:
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
            self.process.wait()
            self.process = None

    def restart(self) -> None:
        self.kill()
        deadline = time.monotonic() + 10
        while True:
            try:
                self._spawn()
                return
            except RuntimeError as exc:
                if "Address already in use" not in str(exc) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def redis_py(self, db: int = 0):  # noqa: ANN201 - redis-py is an optional test dependency
        """An independent client (redis-py) for checking what the server holds."""
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password, db=db)



@pytest.fixture
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.kill()


@pytest.fixture
def secure_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis-secure"), password="s3cret-default-pw", acl_user=("alice", "s3cret-alice-pw"))
    yield server
    server.kill()


@pytest.fixture
def unix_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis-unix"), unix_socket=True)
    yield server
    server.kill()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("LMCACHE_RESP_HOST", "LMCACHE_RESP_PORT", "LMCACHE_RESP_USERNAME", "LMCACHE_RESP_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def pattern(length: int, seed: int) -> bytes:
    """Deterministic, non-repeating test bytes."""
    import random

    return random.Random(seed).randbytes(length)


def lmcache_pool(sizes: list[int]):  # noqa: ANN201 - numpy is imported lazily, like redis-py above
    """A stand-in for LMCache's pinned pool: one uint8 buffer, and writable byte memoryviews of
    the given (possibly different) sizes into it. Returns the pool (keep it alive) and the views."""
    import numpy as np

    pool = np.zeros(sum(sizes), dtype=np.uint8)
    views, offset = [], 0
    for size in sizes:
        views.append(memoryview(pool[offset : offset + size]).cast("B"))
        offset += size
    return pool, views
