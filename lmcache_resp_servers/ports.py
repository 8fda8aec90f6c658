"""Ports for throwaway servers on 127.0.0.1: a free one, or a run of consecutive ones whose
cluster bus ports (+10000) are free too. Never 6379, where a developer's own redis may live."""

from __future__ import annotations

import os
import random
import socket
import time

from lmcache_resp_servers.errors import LaunchError

__all__ = ["BUS_OFFSET", "CLUSTER_PORTS", "HOST", "RESERVED_PORT", "free_cluster_base", "free_port", "port_free"]

HOST = "127.0.0.1"

# A developer's own redis may live there.
RESERVED_PORT = 6379
# Cluster ports come from here: below Linux's ephemeral range (32768+), bus ports (+10000)
# included, so no client socket holds them.
CLUSTER_PORTS = range(20000, 22700)
BUS_OFFSET = 10000


def free_port() -> int:
    """A port the kernel says is free now (released at once, for a server to bind)."""
    while True:
        with socket.socket() as sock:
            sock.bind((HOST, 0))
            port = int(sock.getsockname()[1])
        if port != RESERVED_PORT:
            return port


def port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def free_cluster_base(count: int, rng: random.Random | None = None) -> int:
    """The first of ``count`` consecutive ports in CLUSTER_PORTS that, with their bus ports, are
    free now. Random, to spread concurrent test processes over the range."""
    rng = rng or random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(200):
        base = rng.randrange(CLUSTER_PORTS.start, CLUSTER_PORTS.stop - count)
        if all(port_free(p) and port_free(p + BUS_OFFSET) for p in range(base, base + count)):
            return base
    raise LaunchError(f"no {count} free consecutive ports in {CLUSTER_PORTS.start}..{CLUSTER_PORTS.stop - 1}")

