"""The bridge: one process that owns the I/O engine and a page pool in shared memory, for every
process on the host that attaches to it.

    python -m lmcache_resp.bridge --url redis://10.0.0.5:6379 --socket /run/lmcache-resp.sock \\
        --page-size 4194304 --num-pages 4096 [--num-workers 8] [--cpu-affinity auto] [--cluster]

It connects to the server(s) (credentials from the URL or ``LMCACHE_RESP_USERNAME`` /
``LMCACHE_RESP_PASSWORD``: they stay in this process), creates the pool, places its I/O
threads near the NIC, logs where, and listens on the socket. Clients attach with
``PagedRespStore.attach(socket)`` or ``RespConnector(bridge=socket)``. SIGTERM or SIGINT stops
it cleanly: batches in flight complete or fail and reach their clients, the clients are
dropped, the socket file is removed.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

from lmcache_resp import _native
from lmcache_resp._placement import log_placement
from lmcache_resp.errors import RespError
from lmcache_resp.settings import RespSettings

__all__ = ["Bridge", "main"]

logger = logging.getLogger("lmcache_resp")

Bridge = _native.Bridge


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
    args = parser.parse_args(argv)
    if args.page_size < 1 or args.num_pages < 1:
        parser.error("--page-size and --num-pages must be at least 1")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        settings = RespSettings.resolve(
            args.url, num_workers=args.num_workers, cpu_affinity=args.cpu_affinity,
            cluster=True if args.cluster else None, timeout=args.timeout,
        )
        logger.info("bridge: settings %s", settings.to_dict())
        bridge = Bridge(settings, args.socket, page_size=args.page_size, num_pages=args.num_pages)
    except RespError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    log_placement("bridge", bridge.placement)
    logger.info(
        "bridge: %d pages of %d bytes, %d I/O workers to %s; listening on %s",
        bridge.num_pages, bridge.page_size, bridge.num_workers, bridge.endpoint, bridge.socket,
    )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    while not stop.wait(1.0):
        pass
    logger.info("bridge: stopping (%d clients attached)", bridge.clients)
    bridge.stop()
    logger.info("bridge: stopped; %s removed", bridge.socket)
    return 0


if __name__ == "__main__":
    sys.exit(main())
