"""--plot: the sweep drawn with matplotlib (an optional extra: lmcache-resp[plot])."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from lmcache_resp.bench.errors import BenchError
from lmcache_resp.bench.sweep import SweepPoint, SweepResult
from lmcache_resp.bench.units import format_size

__all__ = ["plot_sweep"]


def _pyplot() -> Any:
    try:
        matplotlib: Any = importlib.import_module("matplotlib")
    except ImportError:
        raise BenchError("--plot needs matplotlib: pip install 'lmcache-resp[plot]' (or matplotlib)") from None
    matplotlib.use("Agg")  # files only: no display needed
    return importlib.import_module("matplotlib.pyplot")


def _draw(axis: Any, points: list[SweepPoint], x: list[int], labels: list[str], title: str, knee: SweepPoint | None) -> None:
    axis.plot(x, [p.set_gbps for p in points], marker="o", label="Batch SET")
    axis.plot(x, [p.get_gbps for p in points], marker="s", label="Batch GET")
    axis.set_xscale("log", base=2)
    axis.set_xticks(x)
    axis.set_xticklabels(labels)
    axis.set_ylabel("GB/s (1 GB = 1e9 bytes of payload)")
    axis.set_ylim(bottom=0)
    axis.set_title(title)
    axis.grid(True, alpha=0.3)
    if knee is not None:
        knee_x = x[points.index(knee)]
        axis.axvline(knee_x, color="grey", linestyle="--", linewidth=1, label="knee (90% of best GET)")
    axis.legend()


def plot_sweep(sweep: SweepResult, path: Path, *, title: str) -> None:
    pyplot = _pyplot()
    figure, (left, right) = pyplot.subplots(1, 2, figsize=(12, 4.5))
    chunks = sweep.by_chunk
    workers = sweep.by_workers
    if chunks:
        _draw(left, chunks, [p.chunk_bytes for p in chunks], [format_size(p.chunk_bytes) for p in chunks],
              f"against chunk size ({chunks[0].num_workers} workers)", sweep.chunk_knee)
        left.set_xlabel("chunk size")
    if workers:
        _draw(right, workers, [p.num_workers for p in workers], [str(p.num_workers) for p in workers],
              f"against I/O workers ({format_size(workers[0].chunk_bytes)} chunks)", sweep.workers_knee)
        right.set_xlabel("I/O workers")
    figure.suptitle(title)
    figure.tight_layout()
    try:
        figure.savefig(path, dpi=120)
    except OSError as exc:
        raise BenchError(f"--plot: cannot write {str(path)!r}: {exc}") from None
    finally:
        pyplot.close(figure)
