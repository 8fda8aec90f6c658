"""A throwaway Sentinel group (SentinelGroup): a primary, its replicas and the Sentinels that
watch it, with short failover timings; what ``python -m lmcache_resp.bench --sentinel-failover``
fails over, and what the test suites' Sentinel tests run against (with passwords and TLS)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

from lmcache_resp_servers import processes
from lmcache_resp_servers.certs import ServerCerts, certs_for
from lmcache_resp_servers.config import quoted
from lmcache_resp_servers.errors import LaunchError, SentinelUnsupported
from lmcache_resp_servers.ports import HOST, free_port
from lmcache_resp_servers.server import RedisServer, server_url
from lmcache_resp_servers.wire import ReplyError, command

__all__ = ["SentinelGroup", "SentinelUnsupported"]


class SentinelGroup(processes.Throwaway):
    """A primary, ``replicas`` replicas (``replicaof``) and ``sentinels`` Sentinels
    (``SERVER sentinel.conf --sentinel``) watching it as ``service``, on free ports in DIR
    (``primary``, ``replica-N``, ``sentinel-N``), started on construction and waited for until
    every replica's link is up and every Sentinel knows the others and the replicas. Short
    ``down_after_ms`` and ``failover_timeout_ms`` make a failover take about a second. A binary
    that cannot run as a Sentinel raises SentinelUnsupported.

    ``password`` is the data servers' (requirepass, masterauth, the Sentinels' auth-pass);
    ``sentinel_password`` the Sentinels' own (requirepass and sentinel-pass). ``tls=True`` (or a
    ServerCerts): every server and Sentinel speaks TLS only, on certificates made in DIR/certs
    (``.certs``), replication and the Sentinels' own links included. ``.url`` is the
    ``redis+sentinel://`` URL (``rediss+sentinel://`` with TLS); ``.primary_port()`` what the
    Sentinels say now."""

    certs: ServerCerts | None

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
        tls: bool | ServerCerts = False,
    ) -> None:
        super().__init__(server, directory, "lmcache-resp-sentinel-")
        self.service = service
        self.password = password
        self.sentinel_password = sentinel_password
        self.certs = None
        self.servers: list[RedisServer] = []
        self.sentinel_processes: list[subprocess.Popen[bytes]] = []
        self.sentinel_ports: list[int] = []
        try:
            self.certs = certs_for(tls, self.directory / "certs")
            # The TLS context of every check of the group's own.
            self.tls_context = None if self.certs is None else self.certs.client_context()
            self.servers.append(self._data_server(self.directory / "primary", self._replication_lines()))
            primary = self.servers[0].port
            for i in range(replicas):
                conf = [f"replicaof {HOST} {primary}", "repl-diskless-sync yes", "repl-diskless-sync-delay 0",
                        *self._replication_lines()]
                self.servers.append(self._data_server(self.directory / f"replica-{i}", conf))
            for i in range(sentinels):
                self._start_sentinel(self.directory / f"sentinel-{i}", primary, down_after_ms, failover_timeout_ms)
            self._wait_settled(replicas, sentinels, time.monotonic() + 20)
        except BaseException:
            self.stop()
            raise

    def _data_server(self, directory: Path, conf: list[str]) -> RedisServer:
        """The primary or a replica, with ``conf`` (replicaof...) in its config file."""
        return RedisServer(directory, server=self.binary, password=self.password, conf=conf, tls=self.certs or False)

    def _replication_lines(self) -> list[str]:
        """What every data server's config gets for replicating: masterauth, TLS replication."""
        lines = [f"masterauth {quoted(self.password)}"] if self.password is not None else []
        return lines + (["tls-replication yes"] if self.certs is not None else [])

    def _listen_lines(self, port: int) -> list[str]:
        """A Sentinel's listener: plaintext on ``port``, or TLS only."""
        if self.certs is None:
            return [f"port {port}"]
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
        """A Sentinel's passwords: the data servers' (auth-pass) and its own."""
        lines = [f"sentinel auth-pass {self.service} {quoted(self.password)}"] if self.password is not None else []
        if self.sentinel_password is not None:
            lines += [f"requirepass {quoted(self.sentinel_password)}",
                      f"sentinel sentinel-pass {quoted(self.sentinel_password)}"]
        return lines

    def _start_sentinel(self, directory: Path, primary: int, down_after_ms: int, failover_timeout_ms: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        port = free_port()
        name = self.service
        lines = [
            *self._listen_lines(port),
            "bind 127.0.0.1",
            f"dir {quoted(str(directory))}",
            "daemonize no",
            f"logfile {quoted(str(directory / 'redis.log'))}",
            "protected-mode no",
            f"sentinel monitor {name} {HOST} {primary} 2",
            f"sentinel down-after-milliseconds {name} {down_after_ms}",
            f"sentinel failover-timeout {name} {failover_timeout_ms}",
            f"sentinel parallel-syncs {name} 2",
            *self._sentinel_auth_lines(),
        ]
        path = directory / "sentinel.conf"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as conf:
            conf.write("\n".join(lines) + "\n")
        with open(directory / "stderr.log", "wb") as stderr:
            process = subprocess.Popen(
                [self.binary, str(path), "--sentinel"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=stderr, env=processes.server_env({}),
            )
        self.sentinel_processes.append(process)
        self.sentinel_ports.append(port)
        deadline = time.monotonic() + 10
        while True:
            try:
                self.sentinel_command(len(self.sentinel_ports) - 1, "PING")
                return
            except (OSError, ReplyError):
                if process.poll() is not None:
                    log = processes.log_tail(directory)
                    if "sentinel" in log.lower() and ("unrecognized" in log.lower() or "bad directive" in log.lower()):
                        raise SentinelUnsupported(f"{self.binary} cannot run as a Sentinel:\n{log}") from None
                    raise LaunchError(f"the Sentinel on port {port} exited ({process.returncode}):\n{log}") from None
                if time.monotonic() > deadline:
                    log = processes.log_tail(directory)
                    raise LaunchError(f"the Sentinel on port {port} did not answer:\n{log}") from None
                time.sleep(0.02)

    def _wait_settled(self, replicas: int, sentinels: int, deadline: float) -> None:
        while True:
            try:
                settled = all(
                    self._field(i, "num-other-sentinels") == str(sentinels - 1)
                    and self._field(i, "num-slaves") == str(replicas)
                    for i in range(sentinels)
                ) and all(
                    b"master_link_status:up" in self.data_command(self.servers[r].port, "INFO", "replication")
                    for r in range(1, replicas + 1)
                )
            except (OSError, ReplyError):
                settled = False
            if settled:
                return
            if time.monotonic() > deadline:
                log = processes.log_tail(self.directory / "sentinel-0")
                raise LaunchError(f"the Sentinels did not settle in time:\n{log}")
            time.sleep(0.05)

    def _field(self, sentinel: int, name: str) -> str | None:
        reply = self.sentinel_command(sentinel, "SENTINEL", "MASTER", self.service)
        assert isinstance(reply, list)
        fields = dict(zip(reply[::2], reply[1::2]))
        value = fields.get(name.encode())
        return value.decode() if isinstance(value, bytes) else None

    def data_command(self, port: int, *args: str) -> Any:
        """One command to the data server on ``port`` (after AUTH with the data servers' password)."""
        return command(port, *args, password=self.password, timeout=2.0, tls=self.tls_context)

    def sentinel_command(self, sentinel: int, *args: str) -> object:
        """One command to Sentinel number ``sentinel`` (after AUTH with the Sentinels' password)."""
        return command(self.sentinel_ports[sentinel], *args, password=self.sentinel_password, timeout=2.0,
                       tls=self.tls_context)

    @property
    def url(self) -> str:
        """``redis+sentinel://[:password@]127.0.0.1:P1,...,/service`` (``rediss+sentinel://``
        with TLS)."""
        nodes = ",".join(f"{HOST}:{port}" for port in self.sentinel_ports)
        return server_url("redis+sentinel", f"{nodes}/{self.service}", self.password, self.certs is not None)

    def primary_port(self, sentinel: int = 0) -> int:
        """The primary's port, as Sentinel number ``sentinel`` says now."""
        reply = self.sentinel_command(sentinel, "SENTINEL", "get-master-addr-by-name", self.service)
        assert isinstance(reply, list), reply
        return int(reply[1])

    def server_on(self, port: int) -> RedisServer:
        """The data server listening on ``port``."""
        return next(s for s in self.servers if s.port == port)

    def wait_for_new_primary(self, old_port: int, timeout: float = 15.0) -> int:
        """Until every Sentinel names a primary other than ``old_port`` that says it is one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                ports = {self.primary_port(i) for i in range(len(self.sentinel_ports))}
                if len(ports) == 1 and old_port not in ports:
                    port = ports.pop()
                    role = self.data_command(port, "ROLE")
                    if isinstance(role, list) and role[0] == b"master":
                        return port
            except (OSError, ReplyError, AssertionError):
                pass
            time.sleep(0.05)
        raise LaunchError(f"no failover away from port {old_port} within {timeout} s")

    def stop(self) -> None:
        for process in self.sentinel_processes:
            processes.kill(process)
        for server in self.servers:
            server.stop()
        self._remove_temp_dir()
