"""One timed batch (wall and CPU seconds), and the medians reported over rounds."""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from lmcache_resp.bench.units import GB

__all__ = ["OpSample", "cpu_per_gb", "median_rate", "process_cpu_seconds", "timed"]

T = TypeVar("T")


@dataclass(frozen=True)
class OpSample:
    op: str
    seconds: float
    keys: int
    payload_bytes: int
    # user+sys of the process that did the work (its I/O threads included), None if unknown
    cpu_seconds: float | None = None

    @property
    def rate(self) -> float:
        """GB/s of payload for SET/GET, keys per second for EXISTS/DELETE."""
        if self.op in ("set", "get"):
            return self.payload_bytes / self.seconds / GB
        return self.keys / self.seconds


def process_cpu_seconds() -> float:
    """user+sys CPU seconds of this process, all its threads (the Rust I/O threads too)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed(op: str, keys: int, payload_bytes: int, call: Callable[[], T]) -> tuple[OpSample, T]:
    cpu_before = process_cpu_seconds()
    started = time.perf_counter()
    result = call()
    seconds = time.perf_counter() - started
    cpu = process_cpu_seconds() - cpu_before
    return OpSample(op, max(seconds, 1e-9), keys, payload_bytes, cpu), result


def median_rate(samples: Sequence[OpSample]) -> float | None:
    return statistics.median(s.rate for s in samples) if samples else None


def cpu_per_gb(samples: Sequence[OpSample]) -> float | None:
    """Client CPU seconds per GB of payload over all samples (None without CPU figures)."""
    moved = sum(s.payload_bytes for s in samples)
    if not samples or moved == 0 or any(s.cpu_seconds is None for s in samples):
        return None
    return sum(s.cpu_seconds or 0.0 for s in samples) / (moved / GB)
