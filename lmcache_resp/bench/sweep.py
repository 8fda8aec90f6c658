"""Throughput against chunk size (at the given workers) and against worker count (at the given
chunk size), each point verified like any run, and the knee of each curve."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lmcache_resp.bench.console import Console
from lmcache_resp.bench.keyspace import KeyLedger
from lmcache_resp.bench.memory import sweep_keys
from lmcache_resp.bench.options import Options
from lmcache_resp.bench.ours import OursDriver
from lmcache_resp.bench.rounds import ClientResult, run_rounds
from lmcache_resp.bench.target import Target
from lmcache_resp.bench.workload import Workload

__all__ = ["KNEE_SHARE", "SWEEP_OPS", "SweepPoint", "SweepResult", "knee", "run_sweep"]

SWEEP_OPS = ("set", "get")
# The knee: the smallest setting that reaches this share of the best GET throughput.
KNEE_SHARE = 0.9


@dataclass(frozen=True)
class SweepPoint:
    chunk_bytes: int
    num_workers: int
    keys: int
    capped: bool  # fewer keys than --num-keys: the point would have moved more than ~2 GiB
    result: ClientResult

    @property
    def set_gbps(self) -> float:
        return self.result.median("set") or 0.0

    @property
    def get_gbps(self) -> float:
        return self.result.median("get") or 0.0


@dataclass(frozen=True)
class SweepResult:
    by_chunk: list[SweepPoint]
    by_workers: list[SweepPoint]

    @property
    def chunk_knee(self) -> SweepPoint | None:
        return knee(self.by_chunk)

    @property
    def workers_knee(self) -> SweepPoint | None:
        return knee(self.by_workers)


def knee(points: Sequence[SweepPoint], share: float = KNEE_SHARE) -> SweepPoint | None:
    """The first point (points are in increasing order) reaching ``share`` of the best GET."""
    if not points:
        return None
    best = max(p.get_gbps for p in points)
    return next((p for p in points if p.get_gbps >= share * best), None)


def run_sweep(options: Options, target: Target, ledger: KeyLedger, console: Console) -> SweepResult:
    chunks = sorted(set(options.sweep_chunks))
    workers = sorted(set(options.sweep_workers))
    console.progress.add_total((options.rounds + 1) * (len(chunks) + len(workers)))
    measured: dict[tuple[int, int], SweepPoint] = {}

    def point(chunk: int, num_workers: int) -> SweepPoint:
        if (chunk, num_workers) not in measured:
            measured[chunk, num_workers] = _measure(options, target, ledger, console, chunk, num_workers)
        else:
            console.progress.advance(options.rounds + 1)
        return measured[chunk, num_workers]

    by_chunk = [point(c, options.num_workers) for c in chunks]
    by_workers = [point(options.chunk_bytes, w) for w in workers]
    return SweepResult(by_chunk, by_workers)


def _measure(options: Options, target: Target, ledger: KeyLedger, console: Console, chunk: int, num_workers: int) -> SweepPoint:
    keys = sweep_keys(options.num_keys, chunk)
    # The same key names at every point: the ledger stays small, and each point deletes its keys.
    workload = Workload(ledger.keys("sweep", keys), chunk, options.seed)
    driver = OursDriver(target, workload, num_workers=num_workers, cpu_affinity=options.cpu_affinity)
    try:
        [result] = run_rounds([driver], SWEEP_OPS, options.rounds, console)
    finally:
        driver.close()
    return SweepPoint(chunk, num_workers, keys, keys < options.num_keys, result)
