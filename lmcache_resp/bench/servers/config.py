"""What goes into a throwaway server's config file (DIR/redis.conf): no persistence, a log in
DIR, and the options a server is started with (password, Unix socket, I/O threads, cluster mode,
TLS only). The tests' TestServerConfig (lmcache_resp_testing.servers) extends it through the
methods that say so (ACL users, client certificates, another certificate presented)."""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from lmcache_resp.bench.servers.certs import ServerCerts

__all__ = ["ServerConfig", "quoted"]


def quoted(value: str) -> str:
    """A double-quoted config string, so spaces, quotes and `#` survive the config parser."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


@dataclass(frozen=True)
class ServerConfig:
    """What goes into one server's config file."""

    directory: Path
    port: int
    # requirepass (and masterauth for a cluster node); the launcher's own checks AUTH with it.
    password: str | None = None
    unix_socket: bool = False
    io_threads: int | None = None
    # Cluster mode, with this node timeout: short, so failover takes seconds.
    cluster_node_timeout_ms: int | None = None
    extra: tuple[str, ...] = ()
    # TLS only, on ``port``: the server presents ``served_cert()`` (``tls.server_cert``) and
    # trusts ``tls.ca``. A cluster node also speaks TLS on its bus and to its primary.
    tls: ServerCerts | None = None

    @property
    def tls_cluster(self) -> bool:
        """``tls-cluster yes`` and ``tls-replication yes``: every TLS cluster node has them."""
        return self.tls is not None and self.cluster_node_timeout_ms is not None

    def served_cert(self) -> tuple[Path, Path]:
        """The certificate and key the server presents."""
        assert self.tls is not None
        return self.tls.server_cert, self.tls.server_key

    def auth_clients(self) -> str:
        """tls-auth-clients: no client certificate is asked for."""
        return "no"

    def client_context(self) -> ssl.SSLContext | None:
        """The TLS context of the launcher's own checks (None: plaintext)."""
        return None if self.tls is None else self.tls.client_context()

    def user_lines(self) -> list[str]:
        """ACL users beside the default one: none."""
        return []

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
        lines += self.user_lines()
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
                f"tls-auth-clients {self.auth_clients()}",
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


