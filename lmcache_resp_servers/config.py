"""What goes into a throwaway server's config file (DIR/redis.conf): no persistence, a log in
DIR, and the options a server is started with (password, Unix socket, I/O threads, cluster mode,
TLS only: which certificate it presents, whether it asks clients for theirs, extra lines). Every
option is a field: a caller that needs more (the tests' ACL users, say) passes config lines in
``extra``."""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from lmcache_resp_servers.certs import ServerCerts
from lmcache_resp_servers.errors import EXIT_USAGE, LaunchError

__all__ = ["TLS_AUTH_CLIENTS", "ServerConfig", "quoted"]

# tls-auth-clients: the server asks for no client certificate, requires one, or checks one if sent.
TLS_AUTH_CLIENTS = ("no", "yes", "optional")


def quoted(value: str) -> str:
    """A double-quoted config string, so spaces, quotes and `#` survive the config parser."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


@dataclass(frozen=True)
class ServerConfig:
    """What goes into one server's config file. Its repr holds no secret: ``password`` and the
    ``extra`` lines (a masterauth, an ACL user) are left out of it."""

    directory: Path
    port: int
    # requirepass (and masterauth for a cluster node); the launcher's own checks AUTH with it.
    password: str | None = field(default=None, repr=False)
    unix_socket: bool = False
    io_threads: int | None = None
    # Cluster mode, with this node timeout: short, so failover takes seconds.
    cluster_node_timeout_ms: int | None = None
    extra: tuple[str, ...] = field(default=(), repr=False)
    # TLS only, on ``port``: the server presents ``served_cert()`` and trusts ``tls.ca``. A
    # cluster node also speaks TLS on its bus and to its primary.
    tls: ServerCerts | None = None
    # tls-auth-clients (TLS_AUTH_CLIENTS). With "yes" the launcher's own checks present
    # ``tls.client_cert``, which must exist.
    tls_auth_clients: str = "no"
    # Another (certificate, key) to present than ``tls.server_cert`` (an expired one, say): the
    # launcher's own checks then do not verify it.
    tls_server_cert: tuple[Path, Path] | None = None

    def __post_init__(self) -> None:
        if self.tls_auth_clients not in TLS_AUTH_CLIENTS:
            raise LaunchError(f"tls_auth_clients must be one of {TLS_AUTH_CLIENTS}, not {self.tls_auth_clients!r}",
                              EXIT_USAGE)
        if self.tls is None and (self.tls_server_cert is not None or self.tls_auth_clients != "no"):
            raise LaunchError("tls_server_cert and tls_auth_clients need tls", EXIT_USAGE)
        if self.tls is not None and self.tls_auth_clients == "yes" and self.tls.client_cert is None:
            raise LaunchError(f"tls_auth_clients='yes' needs certificates with a client certificate, which those in "
                              f"{self.tls.directory} lack (ServerCerts.client_cert)", EXIT_USAGE)

    @property
    def tls_cluster(self) -> bool:
        """``tls-cluster yes`` and ``tls-replication yes``: every TLS cluster node has them."""
        return self.tls is not None and self.cluster_node_timeout_ms is not None

    def served_cert(self) -> tuple[Path, Path]:
        """The certificate and key the server presents."""
        assert self.tls is not None
        return self.tls_server_cert or (self.tls.server_cert, self.tls.server_key)

    @property
    def presents_own_cert(self) -> bool:
        """Whether the server presents ``tls.server_cert``, which a client can verify."""
        return self.tls is not None and self.served_cert() == (self.tls.server_cert, self.tls.server_key)

    def client_context(self) -> ssl.SSLContext | None:
        """The TLS context of the launcher's own checks (None: plaintext): it presents the
        client certificate where there is one, and verifies the server's only when that is
        ``tls.server_cert``, since a caller may have it serve an expired or wrong-host one on
        purpose (the checks know the server by its process id)."""
        return None if self.tls is None else self.tls.client_context(verify=self.presents_own_cert)

    @property
    def path(self) -> Path:
        return self.directory / "redis.conf"

    @property
    def unix_path(self) -> Path | None:
        return self.directory / "redis.sock" if self.unix_socket else None

    def lines(self) -> list[str]:
        cluster = self.cluster_node_timeout_ms is not None
        lines = [
            # TLS only: no plaintext listener at all.
            f"port {0 if self.tls is not None else self.port}",
            # A cluster node announces the address it is reached on: IPv4 only.
            "bind 127.0.0.1" if cluster else "bind 127.0.0.1 -::1",
            f"dir {quoted(str(self.directory))}",
            'save ""',
            "appendonly no",
            "daemonize no",
            f"logfile {quoted(str(self.directory / 'redis.log'))}",
            "protected-mode no",
        ]
        if self.password is not None:
            lines.append(f"requirepass {quoted(self.password)}")
        if self.unix_path is not None:
            lines += [f"unixsocket {quoted(str(self.unix_path))}", "unixsocketperm 700"]
        if self.io_threads is not None and self.io_threads > 1:
            lines += [f"io-threads {self.io_threads}", "io-threads-do-reads yes"]
        if cluster:
            lines += [
                "cluster-enabled yes",
                "cluster-config-file nodes.conf",
                f"cluster-node-timeout {self.cluster_node_timeout_ms}",
                "cluster-allow-replica-migration yes",
                # Fail over even when the replica's link was down a while: tests kill primaries at will.
                "cluster-replica-validity-factor 0",
                # Replicas sync right away instead of waiting for more replicas to batch with.
                "repl-diskless-sync yes",
                "repl-diskless-sync-delay 0",
            ]
            if self.password is not None:
                lines.append(f"masterauth {quoted(self.password)}")
        if self.tls is not None:
            cert, key = self.served_cert()
            lines += [
                f"tls-port {self.port}",
                f"tls-cert-file {quoted(str(cert))}",
                f"tls-key-file {quoted(str(key))}",
                f"tls-ca-cert-file {quoted(str(self.tls.ca))}",
                f"tls-auth-clients {self.tls_auth_clients}",
            ]
            if self.tls_cluster:
                # Outgoing bus and replication links present the server certificate (its EKU
                # allows clientAuth), which a node with tls-auth-clients yes checks.
                lines += ["tls-cluster yes", "tls-replication yes"]
        return lines + list(self.extra)

    def write(self) -> Path:
        """Writes the file, readable by this user only: it may hold secrets."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path.unlink(missing_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as conf:
            conf.write("\n".join(self.lines()) + "\n")
        return self.path
