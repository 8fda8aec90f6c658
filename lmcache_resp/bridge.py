"""The bridge: one process that owns the I/O engine and a page pool in shared memory, for every
process on the host that attaches to it.

    python -m lmcache_resp.bridge --url redis://10.0.0.5:6379 --socket /run/lmcache-resp/bridge.sock \\
        --page-size 4194304 --num-pages 4096 [--num-workers 8] [--cpu-affinity auto] [--cluster] \\
        [--client-pages N] [--max-clients 64] [--allow-uid USER] [--allow-gid GROUP] [--socket-mode 0660] \\
        [--metrics [ADDR:]PORT]

It connects to the server(s) (credentials from the URL or ``LMCACHE_RESP_USERNAME`` /
``LMCACHE_RESP_PASSWORD``: they stay in this process), places its I/O threads near the NIC,
logs where, and listens on the socket. Each client gets a region of its own (its rings and at
most --client-pages pages, out of the --num-pages the clients share): no client can reach
another's pages. Only the bridge's own uid may attach, and the --allow-uid users and members of
the --allow-gid groups (a name or a number; the kernel says who the peer is: SO_PEERCRED, its
groups included); the socket gets --socket-mode whatever the umask. Clients attach with
``PagedRespStore.attach(socket)`` or ``RespConnector(bridge=socket)``. SIGTERM or SIGINT stops
it cleanly: batches in flight complete or fail and reach their clients, the clients are
dropped, the socket file is removed.
"""

from __future__ import annotations

import argparse
import grp
import logging
import pwd
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from lmcache_resp import _logging, _native, metrics
from lmcache_resp._placement import log_placement
from lmcache_resp.errors import RespError
from lmcache_resp.settings import RespSettings
from lmcache_resp.stats import Stats

__all__ = ["Bridge", "main"]

logger = logging.getLogger("lmcache_resp")

Bridge = _native.Bridge

_MAX_ID = (1 << 32) - 2  # (uid_t)-1 means "no id"


def _id(kind: str, lookup: Callable[[str], int]) -> Callable[[str], int]:
    """An argparse type: a number, or a name resolved with ``lookup``."""

    def parse(text: str) -> int:
        if text.isdigit():
            value = int(text)
            if value > _MAX_ID:
                raise argparse.ArgumentTypeError(f"{kind} {text} is out of range")
            return value
        try:
            return lookup(text)
        except KeyError:
            raise argparse.ArgumentTypeError(f"no {kind} named {text!r} on this host") from None

    return parse


_uid = _id("user", lambda name: pwd.getpwnam(name).pw_uid)
_gid = _id("group", lambda name: grp.getgrnam(name).gr_gid)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lmcache_resp.bridge", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", required=True, help="resp://, redis:// or unix:// URL of the server(s)")
    parser.add_argument("--socket", required=True, type=Path, help="the Unix socket clients attach to")
    parser.add_argument("--page-size", required=True, type=int, help="bytes per page (LMCache's chunk size in bytes)")
    parser.add_argument("--num-pages", required=True, type=int, help="pages in the shared pool")
    parser.add_argument("--num-workers", type=int, help="I/O threads (default 8)")
    parser.add_argument("--cpu-affinity", help="auto (default), none, a CPU list like 0-3,8, or numa:N")
    parser.add_argument("--cluster", action="store_true", help="the URL names Redis Cluster nodes")
    parser.add_argument("--timeout", type=float, help="seconds every key completes within (default 10)")
    parser.add_argument("--client-pages", type=int, default=0,
                        help="the most pages one client may hold (default: all --num-pages)")
    parser.add_argument("--max-clients", type=int, default=64, help="clients attached at once (default 64)")
    parser.add_argument("--client-inflight-mb", type=float, default=32.0,
                        help="MiB of one client's values in flight at once: its share, served round-robin (default 32)")
    parser.add_argument("--allow-uid", type=_uid, action="append", default=[], metavar="USER",
                        help="a user (name or uid) that may attach besides the bridge's own (repeat for more)")
    parser.add_argument("--allow-gid", type=_gid, action="append", default=[], metavar="GROUP",
                        help="a group (name or gid) whose members may attach: the peer's primary or "
                             "supplementary group (repeat for more)")
    parser.add_argument("--socket-mode", type=lambda text: int(text, 8), default=0o660,
                        help="the socket file's mode, octal, whatever the umask (default 0660)")
    parser.add_argument("--handshake-timeout", type=float, default=5.0,
                        help="seconds a connection has to finish attaching (default 5)")
    parser.add_argument("--metrics", metavar="[ADDR:]PORT",
                        help="serve the engine's counters as Prometheus text at http://ADDR:PORT/metrics; "
                             "PORT alone binds 127.0.0.1 (this host only), 0.0.0.0:PORT binds every "
                             "interface, which anyone who can reach the host may then read "
                             "(docs/observability.md)")
    args = parser.parse_args(argv)
    if args.page_size < 1 or args.num_pages < 1:
        parser.error("--page-size and --num-pages must be at least 1")
    if args.client_pages < 0 or args.max_clients < 1 or args.client_inflight_mb <= 0:
        parser.error("--client-pages must be >= 0, --max-clients >= 1 and --client-inflight-mb > 0")
    # Operators read stderr: the core's records (attaches, drops, endpoint health) reach it
    # through the lmcache_resp.* loggers in the same format as the bridge's own lines.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    _logging.refresh_level()
    # Handlers first: the socket listens as soon as Bridge() returns, and a SIGTERM from then on
    # (a supervisor that saw the socket) must stop it cleanly, not kill it with the socket left.
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        settings = RespSettings.resolve(
            args.url, num_workers=args.num_workers, cpu_affinity=args.cpu_affinity,
            cluster=True if args.cluster else None, timeout=args.timeout,
        )
        logger.info("bridge: settings %s", settings.to_dict())
        bridge = Bridge(
            settings, args.socket, page_size=args.page_size, num_pages=args.num_pages,
            client_pages=args.client_pages, max_clients=args.max_clients,
            client_inflight_bytes=int(args.client_inflight_mb * (1 << 20)),
            allow_uids=args.allow_uid, allow_gids=args.allow_gid, socket_mode=args.socket_mode,
            handshake_timeout=args.handshake_timeout,
        )
    except RespError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    log_placement("bridge", bridge.placement)
    exporter = None
    if args.metrics:
        try:
            exporter = metrics.serve(args.metrics, lambda: metrics.families([Stats(bridge.stats())]))
        except (OSError, ValueError) as exc:
            print(f"error: cannot serve metrics on {args.metrics}: {exc}", file=sys.stderr)
            bridge.stop()
            return 2
        host, port = exporter.server_address[:2]
        logger.info("bridge: metrics at http://%s:%d/metrics", host, port)
    logger.info(
        "bridge: %d pages of %d bytes (at most %d per client), %d I/O workers to %s; listening on %s (mode %o)",
        bridge.num_pages, bridge.page_size, bridge.client_pages, bridge.num_workers, bridge.endpoint, bridge.socket,
        args.socket_mode,
    )
    while not stop.wait(1.0):
        pass
    logger.info("bridge: stopping (%d clients attached)", bridge.clients)
    bridge.stop()
    if exporter is not None:
        exporter.shutdown()
    _logging.flush()
    logger.info("bridge: stopped; %s removed", bridge.socket)
    return 0


if __name__ == "__main__":
    sys.exit(main())
