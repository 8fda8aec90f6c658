"""The validated settings of one benchmark run (built by cli.parse_options)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lmcache_resp.config import Secret
from lmcache_resp.bench.units import GiB, MiB

__all__ = [
    "ALL_OPS",
    "DEFAULT_OPS",
    "DEFAULT_SWEEP_CHUNKS",
    "DEFAULT_SWEEP_WORKERS",
    "PEERS",
    "SWEEP_POINT_CAP_BYTES",
    "Options",
]

# Run in this order whatever order they are asked in: GET and EXISTS need the SET before them.
ALL_OPS = ("set", "get", "exists", "delete")
DEFAULT_OPS = ("set", "get", "exists")
PEERS = ("redis-py", "lmcache", "redis-benchmark")
DEFAULT_SWEEP_CHUNKS = tuple(int(mib * MiB) for mib in (0.25, 0.5, 1, 2, 4, 8, 16, 32))
DEFAULT_SWEEP_WORKERS = (1, 2, 4, 8, 16)
# Each sweep point moves at most this much per batch: keys are capped per chunk size.
SWEEP_POINT_CAP_BYTES = 2 * GiB


@dataclass(frozen=True)
class Options:
    host: str | None = None
    port: int | None = None
    url: str | None = None
    username: str | None = None
    # A Secret never prints its value: options can be logged or repr'd safely.
    password: Secret | None = None
    chunk_bytes: int = 4 * MiB
    num_workers: int = 8
    num_keys: int = 500
    rounds: int = 3
    ops: tuple[str, ...] = DEFAULT_OPS
    json: bool = False
    sweep: bool = False
    sweep_chunks: tuple[int, ...] = DEFAULT_SWEEP_CHUNKS
    sweep_workers: tuple[int, ...] = DEFAULT_SWEEP_WORKERS
    plot: Path | None = None
    compare: tuple[str, ...] = ()
    lmcache_python: str | None = None
    ceiling: bool = False
    timeout: float = 60.0
    io_threads: int | None = None
    cpu_affinity: str | None = None
    seed: int = 1

    @property
    def embedded(self) -> bool:
        """No server given: the run starts (and stops) a throwaway local redis-server."""
        return self.host is None and self.port is None and self.url is None

    @property
    def pool_bytes(self) -> int:
        return self.num_keys * self.chunk_bytes
