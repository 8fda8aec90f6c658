"""memtier_benchmark (RedisLabs' C++ load generator, the seeds' reference client) as a peer:
its command lines and the reading of its JSON output, pure; memtier_peer.py runs it.

The flags are the seeds': SET ``--ratio=1:0 --data-size=<chunk> --pipeline=64 --clients=10
--threads=1``; GET ``--ratio=0:1 --clients=20 --threads=N``, N the CPUs this process may run on
(os.sched_getaffinity: the host's cores, or what a cpuset leaves). Both move exactly the run's
keys: ``--key-pattern=P:P`` gives each connection its own contiguous share of
``--key-minimum=1 --key-maximum=K``, and ``--requests=K/connections`` walks it once. That is
exact only when every connection's share is whole, so the key count is a multiple of both runs'
connections (key_multiple).

Rates come from memtier's own JSON (``--json-out-file``), never from its text: the seconds are
its request count over its ``Ops/sec`` (which it computes from a microsecond clock), and GB/s
counts payload bytes only (requests x value size, GB = 1e9), the bench's definition for every
client.

No numpy here: the command line imports this module to validate --num-keys.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_BINARY",
    "Endpoint",
    "GET_CLIENTS",
    "SET_CLIENTS",
    "SET_PIPELINE",
    "MemtierRun",
    "connections",
    "key_multiple",
    "keys_near",
    "memtier_command",
    "parse_run",
    "parse_version",
    "usable_cpus",
]

DEFAULT_BINARY = "memtier_benchmark"
# The seeds' flags.
SET_CLIENTS, SET_THREADS, SET_PIPELINE = 10, 1, 64
GET_CLIENTS = 20
# A byte count read back from memtier's KB/sec (two decimals, over its rounded Ops/sec) may
# differ from the exact one by this share.
BYTES_TOLERANCE = 0.01
# memtier's JSON section per op, and the traffic that carries the values.
_SECTIONS = {"set": ("Sets", "KB/sec TX"), "get": ("Gets", "KB/sec RX")}


def usable_cpus() -> int:
    """The CPUs this process may run on: memtier's GET threads (one per core)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def connections(op: str, get_threads: int) -> int:
    """memtier's connections for ``op``: clients per thread x threads."""
    return SET_CLIENTS * SET_THREADS if op == "set" else GET_CLIENTS * get_threads


def key_multiple(get_threads: int) -> int:
    """The key counts both memtier runs split exactly: multiples of both runs' connections."""
    return math.lcm(connections("set", get_threads), connections("get", get_threads))


def keys_near(wanted: int, get_threads: int) -> tuple[int, int]:
    """The valid key counts just below and just above ``wanted`` (the lower one at least one
    multiple)."""
    m = key_multiple(get_threads)
    below = max(m, wanted // m * m)
    return below, -(-wanted // m) * m


@dataclass(frozen=True)
class Endpoint:
    """Where memtier connects: a TCP host and port, or a Unix socket; and the database."""

    host: str | None = None
    port: int | None = None
    unix_path: str | None = None
    db: int = 0


def memtier_command(
    binary: str, endpoint: Endpoint, op: str, *, key_prefix: str, num_keys: int, chunk_bytes: int,
    get_threads: int, json_path: str,
) -> list[str]:
    """The argv of one memtier run: ``op`` ("set" or "get") once over keys 1..num_keys."""
    if op not in _SECTIONS:
        raise ValueError(f"memtier runs set or get, not {op!r}")
    conns = connections(op, get_threads)
    if num_keys % conns:
        raise ValueError(f"{num_keys} keys do not split evenly over memtier's {conns} {op.upper()} connections")
    where = (["--unix-socket", endpoint.unix_path] if endpoint.unix_path is not None
             else ["--server", str(endpoint.host), "--port", str(endpoint.port)])
    if op == "set":
        shape = ["--ratio=1:0", f"--data-size={chunk_bytes}", f"--pipeline={SET_PIPELINE}",
                 f"--clients={SET_CLIENTS}", f"--threads={SET_THREADS}"]
    else:
        shape = ["--ratio=0:1", f"--clients={GET_CLIENTS}", f"--threads={get_threads}"]
    return [
        binary, *where, "--protocol=redis", *(["--select-db", str(endpoint.db)] if endpoint.db else []),
        *shape,
        f"--key-prefix={key_prefix}", "--key-minimum=1", f"--key-maximum={num_keys}", "--key-pattern=P:P",
        f"--requests={num_keys // conns}",
        "--hide-histogram", f"--json-out-file={json_path}",
    ]


@dataclass(frozen=True)
class MemtierRun:
    """One memtier run as its JSON reports it."""

    op: str
    requests: int
    seconds: float
    # Bytes memtier sent (SET) or received (GET), values and protocol together.
    wire_bytes: float
    misses: float


def parse_run(doc: Mapping[str, Any], op: str, *, num_keys: int, chunk_bytes: int) -> MemtierRun:
    """One run from memtier's --json-out-file document; ValueError saying what does not add up
    when it was interrupted, had connection errors, did not make exactly ``num_keys`` requests,
    moved fewer bytes than the values, or (GET) missed a key."""
    try:
        stats = doc["ALL STATS"]
        runtime = stats["Runtime"]
        section, traffic = _SECTIONS[op]
        counts = stats[section]
        requests = int(counts["Count"])
        ops_per_s = float(counts["Ops/sec"])
        misses_per_s = float(counts.get("Misses/sec", 0.0))
        errors = int(counts.get("Connection Errors", 0))
        kb_per_s = float(counts[traffic])
        interrupted = str(runtime.get("Interrupted", "false")).lower() == "true"
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"memtier's JSON has no usable {op.upper()} figures ({type(exc).__name__}: {exc})") from None
    if interrupted:
        raise ValueError(f"memtier's {op.upper()} run was interrupted")
    if errors:
        raise ValueError(f"memtier's {op.upper()} run had {errors} connection error(s)")
    if requests != num_keys:
        raise ValueError(f"memtier made {requests} {op.upper()} requests, not one per key ({num_keys})")
    if not (math.isfinite(ops_per_s) and ops_per_s > 0):
        raise ValueError(f"memtier's {op.upper()} rate is {ops_per_s} requests/s")
    seconds = requests / ops_per_s
    misses = misses_per_s * seconds
    if op == "get" and misses_per_s > 0:
        raise ValueError(f"memtier's GETs missed about {misses:.0f} of {num_keys} keys just written")
    wire_bytes = kb_per_s * 1024 * seconds
    if wire_bytes < (1 - BYTES_TOLERANCE) * num_keys * chunk_bytes:
        direction = "sent" if op == "set" else "received"
        raise ValueError(f"memtier {direction} {wire_bytes:,.0f} bytes in its {op.upper()} run, fewer than the "
                         f"{num_keys * chunk_bytes:,} bytes of values")
    return MemtierRun(op, requests, seconds, wire_bytes, misses)


def parse_version(text: str) -> str | None:
    """``2.3.0`` from ``memtier_benchmark --version`` (``memtier_benchmark v=2.3.0 sha=...``;
    releases before 2.1 said ``memtier_benchmark 1.4.0``); None for what memtier does not say."""
    words = text.split()
    if len(words) < 2 or words[0] != "memtier_benchmark":
        return None
    return next((word[2:] for word in words if word.startswith("v=")), words[1])
