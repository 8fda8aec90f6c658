"""--sweep: throughput against chunk size (at the given workers) and against worker count (at the
given chunk size), each point verified like any run; the knee of each curve; and --plot, the
curves drawn with matplotlib (an optional extra: lmcache-resp[plot])."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmcache_resp.bench.errors import BenchError
from lmcache_resp.bench.options import Options, sweep_keys
from lmcache_resp.bench.console import Console, format_size
from lmcache_resp.bench.measure import ClientResult, run_rounds
from lmcache_resp.bench.ours import OursDriver
from lmcache_resp.bench.target import KeyLedger, Target
from lmcache_resp.bench.workload import Workload

__all__ = ["KNEE_SHARE", "SweepPoint", "SweepResult", "knee", "plot_sweep", "run_sweep"]

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

    @property
    def points(self) -> list[SweepPoint]:
        """Every point measured, once (the two curves may share one)."""
        return list({(p.chunk_bytes, p.num_workers): p for p in self.by_chunk + self.by_workers}.values())


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
    driver = OursDriver(
        target, workload, num_workers=num_workers, cpu_affinity=options.cpu_affinity, get_piece_bytes=options.get_piece_bytes,
        connections_per_worker=options.ours_connections_per_worker,
    )
    try:
        [result] = run_rounds([driver], SWEEP_OPS, options.rounds, console)
    finally:
        driver.close()
    return SweepPoint(chunk, num_workers, keys, keys < options.num_keys, result)


def plot_sweep(sweep: SweepResult, path: Path, *, title: str) -> None:
    try:
        # Imported by name: matplotlib is an optional extra.
        matplotlib: Any = importlib.import_module("matplotlib")
    except ImportError:
        raise BenchError("--plot needs matplotlib: pip install 'lmcache-resp[plot]' (or matplotlib)") from None
    matplotlib.use("Agg")  # files only: no display needed
    pyplot: Any = importlib.import_module("matplotlib.pyplot")
    figure, (left, right) = pyplot.subplots(1, 2, figsize=(12, 4.5))
    chunks, workers = sweep.by_chunk, sweep.by_workers
    if chunks:
        _draw(left, chunks, [p.chunk_bytes for p in chunks], [format_size(p.chunk_bytes) for p in chunks],
              f"against chunk size ({chunks[0].num_workers} workers)", "chunk size", sweep.chunk_knee)
    if workers:
        _draw(right, workers, [p.num_workers for p in workers], [str(p.num_workers) for p in workers],
              f"against I/O workers ({format_size(workers[0].chunk_bytes)} chunks)", "I/O workers", sweep.workers_knee)
    figure.suptitle(title)
    figure.tight_layout()
    try:
        figure.savefig(path, dpi=120)
    except OSError as exc:
        raise BenchError(f"--plot: cannot write {str(path)!r}: {exc}") from None
    finally:
        pyplot.close(figure)


def _draw(axis: Any, points: list[SweepPoint], x: list[int], labels: list[str], title: str, xlabel: str,
          knee_point: SweepPoint | None) -> None:
    axis.plot(x, [p.set_gbps for p in points], marker="o", label="Batch SET")
    axis.plot(x, [p.get_gbps for p in points], marker="s", label="Batch GET")
    axis.set_xscale("log", base=2)
    axis.set_xticks(x)
    axis.set_xticklabels(labels)
    axis.set_xlabel(xlabel)
    axis.set_ylabel("GB/s (1 GB = 1e9 bytes of payload)")
    axis.set_ylim(bottom=0)
    axis.set_title(title)
    axis.grid(True, alpha=0.3)
    if knee_point is not None:
        axis.axvline(x[points.index(knee_point)], color="grey", linestyle="--", linewidth=1,
                     label=f"knee ({KNEE_SHARE:.0%} of best GET)")
    axis.legend()
