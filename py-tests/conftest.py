"""A real, throwaway redis-server per test: a free port, a temp dir, no persistence.

Started through native-tests/redis-test-server.sh, the same script the Rust tests use.
"""

from __future__ import annotations

import os
import random
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
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


CLUSTER_SCRIPT = REPO / "native-tests" / "redis-test-cluster.sh"
# Below Linux's ephemeral range (32768+), bus ports (+10000) included: no client socket holds them.
CLUSTER_PORTS = range(20000, 22700)


@dataclass(frozen=True)
class ClusterNode:
    host: str
    port: int
    pid: int


def _exited(pid: int) -> bool:
    """True once the process is gone, or a zombie waiting to be reaped with no thread left: the
    main thread of a killed server turns zombie while threads sharing its sockets still exit."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z" and len(tasks) <= 1


class RedisCluster:
    """A throwaway local Redis Cluster on 127.0.0.1, started through
    native-tests/redis-test-cluster.sh (the script the Rust tests use): no persistence, a 1 s node
    timeout so failovers take seconds. Its servers die with stop(), or when this process dies."""

    def __init__(self, directory: Path, primaries: int = 3, replicas: int = 0, password: str | None = None) -> None:
        self.directory = directory
        self.password = password
        count = primaries * (1 + replicas)
        rng = random.Random(os.getpid() ^ time.monotonic_ns())
        for attempt in range(6):
            base = rng.randrange(CLUSTER_PORTS.start, CLUSTER_PORTS.stop - count)
            if not all(_port_free(p) and _port_free(p + 10000) for p in range(base, base + count)):
                continue
            args = ["bash", str(CLUSTER_SCRIPT), str(directory), str(base), str(primaries)]
            args += ["--replicas", str(replicas), "--owner", str(os.getpid())]
            # The password goes by the environment, never onto a command line.
            env = dict(os.environ, REDIS_TEST_CLUSTER_PASSWORD=password) if password else None
            result = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env)
            if result.returncode == 0:
                break
            # 98: a port was taken between our check and the server's bind.
            if result.returncode != 98 or attempt == 5:
                raise RuntimeError(f"redis-test-cluster.sh failed (exit {result.returncode}):\n{result.stderr}")
        else:
            raise RuntimeError("no free ports for a cluster")
        self.nodes: list[ClusterNode] = []
        for line in (directory / "pids").read_text().splitlines():
            port, pid = line.split()
            self.nodes.append(ClusterNode("127.0.0.1", int(port), int(pid)))
        assert len(self.nodes) == count, self.nodes

    @property
    def seed_url(self) -> str:
        """A URL for the first node, from which clients discover the rest."""
        seed = self.nodes[0]
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}{seed.host}:{seed.port}"

    def redis_py(self, node: ClusterNode):  # noqa: ANN201 - redis-py is an optional test dependency
        """A plain (non-cluster) redis-py client of one node."""
        import redis

        return redis.Redis(host=node.host, port=node.port, password=self.password)

    def primaries(self) -> list[ClusterNode]:
        """Live nodes that call themselves primaries now (ROLE), in node order."""
        return self._live_with_role(b"master")

    def replicas(self) -> list[ClusterNode]:
        """Live nodes that call themselves replicas now (ROLE), in node order."""
        return self._live_with_role(b"slave")

    def _live_with_role(self, role: bytes) -> list[ClusterNode]:
        nodes = []
        for node in self.nodes:
            if _exited(node.pid):
                continue
            with self.redis_py(node) as client:
                if client.execute_command("ROLE")[0] == role:
                    nodes.append(node)
        return nodes

    def kill(self, node: ClusterNode) -> None:
        """SIGKILL, as in a crash; returns once the node is gone."""
        os.kill(node.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while not _exited(node.pid):
            if time.monotonic() > deadline:
                raise RuntimeError(f"node {node.port} (pid {node.pid}) did not die")
            time.sleep(0.01)

    def stop(self) -> None:
        """Kills every server and waits until they are gone."""
        subprocess.run(["bash", str(CLUSTER_SCRIPT), "stop", str(self.directory)], check=True)

    def cli(self, *args: str) -> str:
        """redis-cli -c (follows redirects like a cluster client) against the first node. The
        password travels in the environment, never on the command line."""
        seed = self.nodes[0]
        env = dict(os.environ, REDISCLI_AUTH=self.password) if self.password else None
        result = subprocess.run(
            ["redis-cli", "-c", "-h", seed.host, "-p", str(seed.port), *args],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, check=True,
        )
        return result.stdout


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@pytest.fixture
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    cluster = RedisCluster(tmp_path_factory.mktemp("redis-cluster"), primaries=3)
    yield cluster
    cluster.stop()


@pytest.fixture
def redis_cluster_replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    cluster = RedisCluster(tmp_path_factory.mktemp("redis-cluster-replicas"), primaries=3, replicas=1)
    yield cluster
    cluster.stop()


class ThreadTicks:
    """Counts how often another Python thread gets to run (about every millisecond) while the
    block runs: a call that holds the GIL starves it."""

    def __init__(self) -> None:
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick)

    def _tick(self) -> None:
        while not self._stop.is_set():
            self.count += 1
            time.sleep(0.001)

    def __enter__(self) -> ThreadTicks:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class LMCacheLikeDriver:
    """What LMCache's adapters do: poll the eventfd (level-triggered), drain when readable."""

    def __init__(self, connector: Any) -> None:
        self.connector = connector
        self.fd = connector.event_fd()
        self.done: dict[int, tuple[int, bool, str, list[bool] | None]] = {}

    def wait(self, future_id: int, timeout: float = 20) -> tuple[int, bool, str, list[bool] | None]:
        deadline = time.monotonic() + timeout
        while future_id not in self.done:
            left = deadline - time.monotonic()
            assert left > 0, f"future {future_id} never completed"
            readable, _, _ = select.select([self.fd], [], [], left)
            if readable:
                for completion in self.connector.drain_completions():
                    assert completion[0] not in self.done, "a completion was delivered twice"
                    self.done[completion[0]] = completion
                # Draining clears readiness.
                assert not select.select([self.fd], [], [], 0)[0] or self.connector.drain_completions() == []
        return self.done.pop(future_id)


# -- the bridge (python -m lmcache_resp.bridge) as a real process ------------------------------------

PAGE = 64 * 1024
PAGES = 64


class BridgeProcess:
    """`python -m lmcache_resp.bridge` in a process of its own, to start, kill and restart."""

    def __init__(self, url: str, socket_path: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        self.socket = socket_path
        self.log = socket_path.with_suffix(".log")
        self.args = [sys.executable, "-m", "lmcache_resp.bridge", "--url", url, "--socket", str(socket_path),
                     "--page-size", str(PAGE), "--num-pages", str(PAGES), "--num-workers", "2", *extra]
        self.env = env
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env=self.env)
        deadline = time.monotonic() + 20
        while not self._listening():
            assert self.process.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, "the bridge did not start listening"
            time.sleep(0.05)

    def _listening(self) -> bool:
        try:
            with socket.socket(socket.AF_UNIX) as probe:
                probe.connect(str(self.socket))
            return True
        except OSError:
            return False

    def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.process is not None
        self.process.send_signal(sig)
        code = self.process.wait(20)
        self.process = None
        return code


@pytest.fixture
def bridge(redis_server: RedisServer, tmp_path: Path) -> Iterator[BridgeProcess]:
    process = BridgeProcess(f"redis://127.0.0.1:{redis_server.port}", tmp_path / "bridge.sock")
    yield process
    if process.process is not None:
        process.stop(signal.SIGKILL)
