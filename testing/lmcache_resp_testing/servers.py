"""Throwaway Redis (or Valkey) servers, clusters and Sentinels for the test suites: the
benchmark's launchers (``lmcache_resp.bench.servers``, shipped) with what only tests need.

- RedisServer: ``password`` and ``acl_user=(name, password)`` (full rights); TLS on the test
  certificates (``tls=True``: made in DIR/certs; or ``tls=certs``, a TestCerts shared by
  several servers) with ``tls_auth_clients`` "no" (default), "yes" (a client certificate by
  ``certs.ca`` required) or "optional", and ``tls_server_cert=(cert, key)`` presenting another
  pair (``certs.expired_cert``, ``certs.wrong_host_cert``...) on purpose; ``.url`` (``rediss://``
  for TLS), ``.tls_kwargs()`` (redis-py's ``ssl=True, ssl_ca_certs=...`` and, for mutual TLS,
  ``ssl_certfile=, ssl_keyfile=``), ``.client_context()`` and ``.command(...)`` (stdlib ssl and
  a raw socket), ``.redis_py()``; faults: ``kill``, ``restart``, ``pause``, ``resume``.
- RedisCluster: ``password``, TLS on every node, bus and replication included (``tls-cluster
  yes``: the cluster announces its TLS ports), ``.seed_url``, ``.command(node, ...)``,
  ``.primaries()``/``.replicas()`` (ROLE now), ``.kill(node)``, ``.cli(...)`` (redis-cli -c),
  ``.redis_py(node)``.
- SentinelGroup: a primary, replicas and Sentinels watching it, with short failover timings,
  ``.url`` (``redis+sentinel://``), ``.primary_port()``, ``.wait_for_new_primary(old)``; the
  benchmark's, with ``password``, ``sentinel_password`` and TLS (``tls=True``) added;
  SentinelUnsupported when the binary cannot be a Sentinel.
- server_supports_tls: whether a server binary has TLS, told in milliseconds.

Secrets never go onto a command line, where ``ps`` shows them: passwords go into the config
files and the REDISCLI_AUTH of redis-cli's environment.
"""

from __future__ import annotations

import functools
import importlib
import os
import signal
import ssl
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmcache_resp.bench.servers import cluster as bench_cluster
from lmcache_resp.bench.servers import processes, wire
from lmcache_resp.bench.servers import sentinel as bench_sentinel
from lmcache_resp.bench.servers import server as bench_server
from lmcache_resp.bench.servers.binaries import SERVER_ENV, cli_binary, server_binary, server_malloc, server_version
from lmcache_resp.bench.servers.certs import ServerCerts
from lmcache_resp.bench.servers.cluster import ClusterNode
from lmcache_resp.bench.servers.config import ServerConfig, quoted
from lmcache_resp.bench.servers.errors import (
    EXIT_FAILED,
    EXIT_MISSING,
    EXIT_OK,
    EXIT_PORT_TAKEN,
    EXIT_USAGE,
    LaunchError,
    TlsUnsupported,
)
from lmcache_resp.bench.servers.memory import KEEP_FREED_MALLOC_CONF
from lmcache_resp.bench.servers.ports import CLUSTER_PORTS, HOST, free_port
from lmcache_resp.bench.servers.sentinel import SentinelUnsupported
from lmcache_resp.bench.servers.watcher import exited
from lmcache_resp.bench.servers.wire import ReplyError, command
from lmcache_resp_testing import pattern
from lmcache_resp_testing.certs import TestCerts, make_test_certs

__all__ = [
    "CLUSTER_PORTS",
    "EXIT_FAILED",
    "EXIT_MISSING",
    "EXIT_OK",
    "EXIT_PORT_TAKEN",
    "EXIT_USAGE",
    "HOST",
    "KEEP_FREED_MALLOC_CONF",
    "SERVER_ENV",
    "TLS_AUTH_CLIENTS",
    "ClusterNode",
    "LaunchError",
    "RedisCluster",
    "RedisServer",
    "ReplyError",
    "SentinelGroup",
    "SentinelUnsupported",
    "TestCerts",
    "TestServerConfig",
    "TlsUnsupported",
    "cli_binary",
    "command",
    "free_port",
    "make_test_certs",
    "pattern",
    "server_binary",
    "server_malloc",
    "server_supports_tls",
    "server_version",
]

# tls-auth-clients: the server asks for no client certificate, requires one, or checks one if sent.
TLS_AUTH_CLIENTS = ("no", "yes", "optional")


@dataclass(frozen=True)
class TestServerConfig(ServerConfig):
    """A server's config file with the tests' options: an ACL user, client certificates asked
    for (``tls_auth_clients``), another certificate presented (``tls_server_cert``)."""

    __test__ = False  # not a pytest test class, whatever its name

    acl_user: tuple[str, str] | None = None
    tls_auth_clients: str = "no"
    tls_server_cert: tuple[Path, Path] | None = None

    def __post_init__(self) -> None:
        if self.tls_auth_clients not in TLS_AUTH_CLIENTS:
            raise LaunchError(f"tls_auth_clients must be one of {TLS_AUTH_CLIENTS}, not {self.tls_auth_clients!r}",
                              EXIT_USAGE)
        if self.tls is None and (self.tls_server_cert is not None or self.tls_auth_clients != "no"):
            raise LaunchError("tls_server_cert and tls_auth_clients need tls", EXIT_USAGE)

    def served_cert(self) -> tuple[Path, Path]:
        return self.tls_server_cert or super().served_cert()

    def auth_clients(self) -> str:
        return self.tls_auth_clients

    @property
    def presents_test_server_cert(self) -> bool:
        return self.tls is not None and self.served_cert() == (self.tls.server_cert, self.tls.server_key)

    def client_context(self) -> ssl.SSLContext | None:
        """The TLS context of the launcher's own checks (None: plaintext): it presents the
        client certificate, and verifies the server's only when that is the good test one, since
        a test may serve an expired or wrong-host certificate on purpose."""
        if not isinstance(self.tls, TestCerts):
            return super().client_context()
        return self.tls.client_context(verify=self.presents_test_server_cert)

    def user_lines(self) -> list[str]:
        if self.acl_user is None:
            return []
        name, password = self.acl_user
        if not name or any(c.isspace() for c in name):
            raise LaunchError(f"ACL user name {name!r} is empty or has spaces", EXIT_USAGE)
        return [f"user {name} on {quoted('>' + password)} ~* &* +@all"]


@functools.lru_cache(maxsize=None)
def server_supports_tls(binary: str) -> bool:
    """Whether ``binary`` was built with TLS, in some milliseconds: asked for a TLS port without
    certificates, a server with TLS exits for their lack, one without for its own (saying
    NO_TLS_IN_LOG), before either listens."""
    with tempfile.TemporaryDirectory(prefix="lmcache-resp-tls-probe-") as scratch:
        try:
            probe = subprocess.run(
                [binary, "--port", "0", "--tls-port", str(free_port()), "--tls-cert-file", os.path.join(scratch, "none"),
                 "--tls-key-file", os.path.join(scratch, "none"), "--save", "", "--appendonly", "no", "--dir", scratch,
                 "--logfile", ""],
                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10,
                env=processes.env_without_secrets(), check=False,
            )
        except subprocess.TimeoutExpired:
            # It went on running: whatever it is, it did not stop for want of TLS.
            return True
    return not any(words in probe.stdout + probe.stderr for words in processes.NO_TLS_IN_LOG)


def _certs_for(tls: bool | TestCerts, directory: Path) -> TestCerts | None:
    """A ``tls`` option: True, test certificates made in DIR/certs; a TestCerts, those; False, none."""
    if isinstance(tls, TestCerts):
        return tls
    return make_test_certs(directory / "certs") if tls else None


def _tls_kwargs(certs: ServerCerts | None, auth_clients: str, client_cert: bool | None) -> dict[str, Any]:
    if certs is None:
        return {}
    kwargs: dict[str, Any] = {"ssl": True, "ssl_ca_certs": str(certs.ca)}
    if isinstance(certs, TestCerts) and (client_cert or (client_cert is None and auth_clients == "yes")):
        kwargs.update(ssl_certfile=str(certs.client_cert), ssl_keyfile=str(certs.client_key))
    return kwargs


class RedisServer(bench_server.RedisServer):
    """A throwaway server for the tests, started on construction (see the module docstring and
    the benchmark's RedisServer, which it extends)."""

    certs: TestCerts | None

    def __init__(
        self,
        directory: Path | str | None = None,
        *,
        password: str | None = None,
        acl_user: tuple[str, str] | None = None,
        unix_socket: bool = False,
        io_threads: int | None = None,
        conf: Sequence[str] = (),
        cluster: bool = False,
        server: str | None = None,
        tls: bool | TestCerts = False,
        tls_auth_clients: str = "no",
        tls_server_cert: tuple[Path, Path] | None = None,
        keep_freed_memory: bool = False,
    ) -> None:
        # Read by _config, which the benchmark's constructor calls to start the server.
        self.acl_user = acl_user
        self.tls_auth_clients = tls_auth_clients
        self.tls_server_cert = tls_server_cert
        super().__init__(directory, password=password, unix_socket=unix_socket, io_threads=io_threads, conf=conf,
                         cluster=cluster, server=server, tls=tls, keep_freed_memory=keep_freed_memory)

    def _make_certs(self, directory: Path) -> TestCerts:
        return make_test_certs(directory)

    def _config(self) -> TestServerConfig:
        return TestServerConfig(
            self.directory, self.port, password=self.password, acl_user=self.acl_user, unix_socket=self.unix_socket,
            io_threads=self.io_threads, cluster_node_timeout_ms=2000 if self.cluster else None, extra=self.conf,
            tls=self.certs, tls_auth_clients=self.tls_auth_clients, tls_server_cert=self.tls_server_cert,
        )

    @property
    def url(self) -> str:
        """``redis://`` or, for a TLS server, ``rediss://`` (the CA etc.: :meth:`tls_kwargs`)."""
        auth = f":{self.password}@" if self.password else ""
        return f"{'rediss' if self.certs is not None else 'redis'}://{auth}{HOST}:{self.port}"

    def tls_kwargs(self, client_cert: bool | None = None) -> dict[str, Any]:
        """What a client needs to reach this TLS server, in redis-py's keyword names (which our
        fronts take too): ``ssl=True, ssl_ca_certs=``; plus ``ssl_certfile=, ssl_keyfile=`` (the
        client certificate) with ``client_cert=True``, or by default when the server requires
        one. ``{}`` for a plaintext server. The server's certificate is verified as any client
        would: against a server presenting a bad one, these fail, as they should."""
        return _tls_kwargs(self.certs, self.tls_auth_clients, client_cert)

    def client_context(self, client_cert: bool = True) -> ssl.SSLContext | None:
        """A stdlib TLS context for this server (None: plaintext), as :func:`command` takes it;
        it verifies the server's certificate only when that is ``certs.server_cert``."""
        if self.certs is None:
            return None
        return self.certs.client_context(client_cert=client_cert, verify=self._config().presents_test_server_cert)

    def command(self, *args: str) -> object:
        """One command over a raw socket (TLS for a TLS server), after AUTH with the password;
        its reply (error replies raise ReplyError)."""
        return command(self.port, *args, password=self.password, tls=self.client_context())

    def pause(self) -> None:
        """Freezes the server (SIGSTOP): connections stay open, nothing is answered."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def log_tail(self, chars: int = 2000) -> str:
        return processes.log_tail(self.directory, chars)

    def redis_py(self, db: int = 0) -> Any:
        """An independent client (redis-py, imported only here) to check what the server holds:
        over TLS to a TLS server, checking its certificate unless it presents another pair than
        ``certs.server_cert`` on purpose."""
        redis = importlib.import_module("redis")
        tls = self.tls_kwargs()
        if tls and not self._config().presents_test_server_cert:
            tls.update(ssl_cert_reqs="none", ssl_check_hostname=False)
        return redis.Redis(host=HOST, port=self.port, password=self.password, db=db, **tls)


class RedisCluster(bench_cluster.RedisCluster):
    """A throwaway local Redis Cluster for the tests, started on construction (see the module
    docstring and the benchmark's RedisCluster, which it extends). TLS: ``tls=True`` (test
    certificates made in DIR/certs) or ``tls=certs`` (a TestCerts): every node TLS only, on its
    bus and replication links too, ``.certs`` the TestCerts, ``.seed_url`` a ``rediss://`` one;
    ``tls_auth_clients`` as for RedisServer."""

    certs: TestCerts | None

    def __init__(
        self,
        directory: Path | str | None = None,
        primaries: int = 3,
        replicas: int = 0,
        password: str | None = None,
        *,
        server: str | None = None,
        cli: str | None = None,
        io_threads: int | None = None,
        node_timeout_ms: int = 1000,
        tls: bool | TestCerts = False,
        tls_auth_clients: str = "no",
        keep_freed_memory: bool = False,
    ) -> None:
        # Read by _node_config, which the benchmark's constructor calls to start the cluster.
        self.password = password
        self.tls_auth_clients = tls_auth_clients
        self._tls = tls
        self.certs = None
        super().__init__(directory, primaries, replicas, server=server, cli=cli, io_threads=io_threads,
                         node_timeout_ms=node_timeout_ms, keep_freed_memory=keep_freed_memory)

    def _node_config(self) -> TestServerConfig:
        # Called once, by the constructor, once the directory exists.
        self.certs = _certs_for(self._tls, self.directory)
        return TestServerConfig(self.directory, 0, password=self.password, io_threads=self.io_threads,
                                cluster_node_timeout_ms=self.node_timeout_ms, tls=self.certs,
                                tls_auth_clients=self.tls_auth_clients)

    @property
    def seed_url(self) -> str:
        """A URL for the first node, from which clients discover the rest: ``rediss://`` for a
        TLS cluster (the CA etc.: :meth:`tls_kwargs`)."""
        seed = self.nodes[0]
        auth = f":{self.password}@" if self.password else ""
        return f"{'rediss' if self.certs is not None else 'redis'}://{auth}{seed.host}:{seed.port}"

    def tls_kwargs(self, client_cert: bool | None = None) -> dict[str, Any]:
        """As RedisServer.tls_kwargs: redis-py's names for reaching this TLS cluster ({} if plaintext)."""
        return _tls_kwargs(self.certs, self.tls_auth_clients, client_cert)

    def client_context(self, client_cert: bool = True) -> ssl.SSLContext | None:
        """A stdlib TLS context for the nodes (None: plaintext), as :func:`command` takes it."""
        return None if self.certs is None else self.certs.client_context(client_cert=client_cert)

    def command(self, node: ClusterNode, *args: str) -> object:
        """One command to one node over a raw socket (TLS for a TLS cluster); its reply (error
        replies raise)."""
        return command(node.port, *args, password=self.password, host=node.host, tls=self.client_context())

    def primaries(self) -> list[ClusterNode]:
        """Live nodes that call themselves primaries now (ROLE), in node order."""
        return self._live_with_role("master")

    def replicas(self) -> list[ClusterNode]:
        """Live nodes that call themselves replicas now (ROLE), in node order."""
        return self._live_with_role("slave")

    def _live_with_role(self, role: str) -> list[ClusterNode]:
        context = self.client_context()
        return [
            node for node in self.nodes
            if not exited(node.pid) and wire.role(node.port, self.password, context) == role
        ]

    def kill(self, node: ClusterNode) -> None:
        """SIGKILL, as in a crash; returns once the node is gone."""
        os.kill(node.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while not exited(node.pid):
            if time.monotonic() > deadline:
                raise LaunchError(f"node {node.port} (pid {node.pid}) did not die")
            time.sleep(0.01)
        self._started.processes[self.nodes.index(node)].wait()

    def cli(self, *args: str) -> str:
        """redis-cli -c (follows redirects like a cluster client) against the first node; its
        stdout. The password travels in the environment, never on the command line."""
        seed = self.nodes[0]
        env = dict(os.environ)
        if self.password:
            env.update(dict.fromkeys(processes.CLI_AUTH_ENV, self.password))
        tls = self.certs.cli_args() if self.certs is not None else []
        result = subprocess.run(
            [self.cli_binary, "-c", *tls, "-h", seed.host, "-p", str(seed.port), *args],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, check=True,
        )
        return result.stdout

    def redis_py(self, node: ClusterNode) -> Any:
        """A plain (non-cluster) redis-py client of one node (redis-py is imported only here),
        over TLS for a TLS cluster."""
        redis = importlib.import_module("redis")
        return redis.Redis(host=node.host, port=node.port, password=self.password, **self.tls_kwargs())


class SentinelGroup(bench_sentinel.SentinelGroup):
    """A throwaway Sentinel group for the tests (see the module docstring and the benchmark's
    SentinelGroup, which it extends). ``password`` is the data servers' (requirepass, masterauth,
    the Sentinels' auth-pass); ``sentinel_password`` the Sentinels' own (requirepass and
    sentinel-pass). ``tls=True``: every server and Sentinel speaks TLS only, on test certificates
    made in DIR/certs (``.certs``), replication and the Sentinels' own links included."""

    certs: TestCerts | None

    def __init__(
        self,
        directory: Path | str | None = None,
        *,
        replicas: int = 2,
        sentinels: int = 3,
        service: str = "mymaster",
        server: str | None = None,
        password: str | None = None,
        sentinel_password: str | None = None,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 3000,
        tls: bool = False,
    ) -> None:
        # Read by the hooks, which the benchmark's constructor calls to start the group.
        self.password = password
        self.sentinel_password = sentinel_password
        self._tls = tls
        self.certs = None
        super().__init__(directory, replicas=replicas, sentinels=sentinels, service=service, server=server,
                         down_after_ms=down_after_ms, failover_timeout_ms=failover_timeout_ms)

    def _before_start(self) -> None:
        self.certs = _certs_for(self._tls, self.directory)
        self.tls_context = None if self.certs is None else self.certs.client_context()

    def _data_server(self, directory: Path, conf: list[str]) -> RedisServer:
        return RedisServer(directory, server=self.binary, password=self.password, conf=conf, tls=self.certs or False)

    def _replication_lines(self) -> list[str]:
        lines = [f"masterauth {quoted(self.password)}"] if self.password is not None else []
        return lines + (["tls-replication yes"] if self.certs is not None else [])

    def _listen_lines(self, port: int) -> list[str]:
        if self.certs is None:
            return super()._listen_lines(port)
        return [
            "port 0",
            f"tls-port {port}",
            f"tls-cert-file {quoted(str(self.certs.server_cert))}",
            f"tls-key-file {quoted(str(self.certs.server_key))}",
            f"tls-ca-cert-file {quoted(str(self.certs.ca))}",
            "tls-auth-clients no",
            "tls-replication yes",
        ]

    def _sentinel_auth_lines(self) -> list[str]:
        lines = [f"sentinel auth-pass {self.service} {quoted(self.password)}"] if self.password is not None else []
        if self.sentinel_password is not None:
            lines += [f"requirepass {quoted(self.sentinel_password)}",
                      f"sentinel sentinel-pass {quoted(self.sentinel_password)}"]
        return lines

    @property
    def url(self) -> str:
        """``redis+sentinel://[:password@]127.0.0.1:P1,...,/service`` (``rediss+sentinel://``
        with TLS)."""
        auth = f":{self.password}@" if self.password else ""
        nodes = ",".join(f"{HOST}:{port}" for port in self.sentinel_ports)
        return f"{'rediss' if self.certs is not None else 'redis'}+sentinel://{auth}{nodes}/{self.service}"
