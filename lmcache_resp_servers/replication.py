"""Waiting for replicas to catch up with their primaries, so that reads from them see what was
just written (replication is asynchronous)."""

from __future__ import annotations

import ssl
import time
from collections.abc import Sequence

from lmcache_resp_servers.ports import HOST
from lmcache_resp_servers import wire

__all__ = ["REPLICA_WAIT_S", "wait_for_replicas"]

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
            return wire.info(port, "INFO", "replication", password=password, timeout=max(min(left, 1.0), 0.05), tls=tls)
        except (OSError, wire.ReplyError):
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


