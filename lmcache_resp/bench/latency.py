"""Per-op latency: single-key batches timed one by one (what one lookup costs, not a batch)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from lmcache_resp.bench import pattern
from lmcache_resp.bench.errors import VerificationError
from lmcache_resp.bench.ours import OursDriver
from lmcache_resp.bench.workload import apply_test_corruption

__all__ = ["LATENCY_KEYS", "LatencyStats", "measure_latency"]

LATENCY_KEYS = 200


@dataclass(frozen=True)
class LatencyStats:
    op: str
    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, op: str, seconds: Sequence[float]) -> LatencyStats:
        ms = np.asarray(seconds) * 1e3
        return cls(op, len(ms), float(np.percentile(ms, 50)), float(np.percentile(ms, 99)), float(ms.max()))


def _each(count: int, call: Callable[[int], object]) -> list[float]:
    """Seconds of ``call(i)`` for each i, timed one by one."""
    times = []
    for i in range(count):
        started = time.perf_counter()
        call(i)
        times.append(time.perf_counter() - started)
    return times


def measure_latency(driver: OursDriver, ops: Sequence[str]) -> dict[str, LatencyStats]:
    """SET then GET (then EXISTS, DELETE when asked) of min(num_keys, 200) keys, one key per
    batch; every GET is verified like the throughput rounds."""
    store, w = driver.store, driver.workload
    n = min(len(w.keys), LATENCY_KEYS)
    keys, pages, buffers = w.keys[:n], driver.pages[:n], driver.buffers[:n]
    for i, buffer in enumerate(buffers):
        pattern.fill(buffer, w.seed, pattern.LATENCY_ROUND, i)
    stats = {"set": LatencyStats.of("set", _each(n, lambda i: store.put([keys[i]], [pages[i]])))}
    if "get" in ops:
        w.poison(buffers)
        hits: list[bool] = []
        times = _each(n, lambda i: hits.extend(store.get([keys[i]], [pages[i]])))
        stats["get"] = LatencyStats.of("get", times)
        apply_test_corruption(buffers)
        read = [b if h else None for b, h in zip(buffers, hits)]
        mismatches = w.verify(driver.name, pattern.LATENCY_ROUND, read)
        if mismatches:
            raise VerificationError(mismatches)
    if "exists" in ops:
        stats["exists"] = LatencyStats.of("exists", _each(n, lambda i: store.exists([keys[i]])))
    deletes = _each(n, lambda i: store.delete([keys[i]]))
    if "delete" in ops:
        stats["delete"] = LatencyStats.of("delete", deletes)
    return stats
