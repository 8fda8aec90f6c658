"""A throwaway server (RedisServer): a free port on 127.0.0.1, a temp dir, no persistence;
optionally a password, a Unix socket, I/O threads, cluster mode, the binary (``--server``), the
memory regime, and TLS only: on certificates made for it or given, presenting another
certificate than its own, asking clients for theirs. The benchmark and the test suites start
their servers with it; what only tests do to one (stop it with SIGSTOP, talk to it through
redis-py) is the test-support package's."""

from __future__ import annotations

import dataclasses
import os
import ssl
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lmcache_resp_servers import processes, wire
from lmcache_resp_servers.certs import ServerCerts, certs_for
from lmcache_resp_servers.config import ServerConfig
from lmcache_resp_servers.errors import EXIT_PORT_TAKEN, EXIT_USAGE, LaunchError
from lmcache_resp_servers.memory import check_keeps_freed_memory, keep_freed_memory_env
from lmcache_resp_servers.ports import HOST, free_cluster_base, free_port

__all__ = ["RedisServer", "server_url", "tls_kwargs"]


def server_url(scheme: str, address: str, password: str | None, tls: bool) -> str:
    """``redis://[:password@]address``; with ``tls``, ``rediss://`` (``scheme`` ``redis``, or
    ``redis+sentinel`` for ``rediss+sentinel://``)."""
    auth = f":{password}@" if password else ""
    return f"{scheme.replace('redis', 'rediss', 1) if tls else scheme}://{auth}{address}"


def tls_kwargs(certs: ServerCerts | None, auth_clients: str, client_cert: bool | None) -> dict[str, Any]:
    """What a client needs to reach a server on ``certs``, in redis-py's keyword names (which
    lmcache_resp's fronts take too): ``ssl=True, ssl_ca_certs=``, and ``ssl_certfile=,
    ssl_keyfile=`` (the client certificate) with ``client_cert=True``, or by default when the
    server requires one. ``{}`` for a plaintext server."""
    if certs is None:
        return {}
    kwargs: dict[str, Any] = {"ssl": True, "ssl_ca_certs": str(certs.ca)}
    if client_cert or (client_cert is None and auth_clients == "yes"):
        if certs.client_cert is None or certs.client_key is None:
            raise LaunchError(f"the certificates in {certs.directory} have no client certificate", EXIT_USAGE)
        kwargs.update(ssl_certfile=str(certs.client_cert), ssl_keyfile=str(certs.client_key))
    return kwargs


class RedisServer(processes.Throwaway):
    """A throwaway server, started on construction: ``RedisServer(directory)`` (or no directory:
    a temp dir of its own, removed by :meth:`stop`), then ``.port``, ``.unix_path``, ``.url``.
    Options: ``password`` (requirepass), ``unix_socket``, ``io_threads``, ``conf`` (extra config
    lines: an ACL user, a ``replicaof``), ``cluster`` (cluster mode, on a port whose bus port is
    free), ``server`` (see :func:`server_binary`), ``keep_freed_memory`` (the server keeps the
    memory it frees: see :mod:`~lmcache_resp_servers.memory`); ``tls=True`` (TLS only, on
    certificates made in DIR/certs: ``.certs``) or ``tls=certs`` (a ServerCerts, shared by
    several servers), with ``tls_auth_clients`` "no" (default), "yes" (a client certificate by
    ``certs.ca`` required: the certificates must hold one) or "optional", and
    ``tls_server_cert=(cert, key)`` presenting another pair than ``certs.server_cert``."""

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
        tls_auth_clients: str = "no",
        tls_server_cert: tuple[Path, Path] | None = None,
        keep_freed_memory: bool = False,
    ) -> None:
        super().__init__(server, directory, "lmcache-resp-redis-")
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        try:
            self.certs = certs_for(tls, self.directory / "certs")
            # Every option but the port, checked before anything starts.
            self.options = ServerConfig(
                self.directory, 0, password=password, unix_socket=unix_socket, io_threads=io_threads,
                cluster_node_timeout_ms=2000 if cluster else None, extra=tuple(conf), tls=self.certs,
                tls_auth_clients=tls_auth_clients, tls_server_cert=tls_server_cert,
            )
            self.keep_freed_memory = keep_freed_memory
            self.allocator_env = keep_freed_memory_env(self.binary) if keep_freed_memory else {}
            self._start_on_a_free_port()
        except BaseException:
            self._remove_temp_dir()
            raise

    @property
    def password(self) -> str | None:
        return self.options.password

    @property
    def io_threads(self) -> int | None:
        return self.options.io_threads

    @property
    def cluster(self) -> bool:
        return self.options.cluster_node_timeout_ms is not None

    @property
    def tls_auth_clients(self) -> str:
        return self.options.tls_auth_clients

    def _config(self) -> ServerConfig:
        return dataclasses.replace(self.options, port=self.port)

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
        path = self.options.unix_path
        return None if path is None else str(path)

    @property
    def url(self) -> str:
        """``redis://`` or, for a TLS server, ``rediss://``, with the password (the CA etc.:
        :meth:`tls_kwargs`)."""
        return server_url("redis", f"{HOST}:{self.port}", self.password, self.certs is not None)

    def tls_kwargs(self, client_cert: bool | None = None) -> dict[str, Any]:
        """What a client needs to reach this server (:func:`tls_kwargs`): ``{}`` for a plaintext
        one. The server's certificate is verified as any client would: against a server
        presenting another one on purpose, these fail, as they should."""
        return tls_kwargs(self.certs, self.tls_auth_clients, client_cert)

    def client_context(self, client_cert: bool = True) -> ssl.SSLContext | None:
        """A stdlib TLS context for this server (None: plaintext), as :func:`wire.command` takes
        it; it verifies the server's certificate only when that is ``certs.server_cert``."""
        if self.certs is None:
            return None
        return self.certs.client_context(client_cert=client_cert, verify=self.options.presents_own_cert)

    def command(self, *args: str) -> object:
        """One command over a raw socket (TLS for a TLS server), after AUTH with the password;
        its reply (error replies raise ReplyError)."""
        return wire.command(self.port, *args, password=self.password, tls=self.client_context())

    def log_tail(self, chars: int = 2000) -> str:
        """The ends of the server's stderr and log."""
        return processes.log_tail(self.directory, chars)

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
