"""Rounds of the same workload for several clients on the same server: in each round every
client in turn (the order rotates per round, so none always runs on the warmest server)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from lmcache_resp.bench.console import Console
from lmcache_resp.bench.driver import Driver
from lmcache_resp.bench.errors import PeerFailed
from lmcache_resp.bench.pattern import WARMUP_ROUND
from lmcache_resp.bench.samples import OpSample, cpu_per_gb, median_rate
from lmcache_resp.bench.workload import round_label

__all__ = ["ClientResult", "run_rounds"]


@dataclass
class ClientResult:
    name: str
    description: str
    ops: tuple[str, ...]
    samples: dict[str, list[OpSample]] = field(default_factory=dict)
    failure: str | None = None

    def median(self, op: str) -> float | None:
        return median_rate(self.samples.get(op, []))

    def cpu_per_gb(self, op: str) -> float | None:
        return cpu_per_gb(self.samples.get(op, []))


def run_rounds(drivers: Sequence[Driver], ops: Sequence[str], rounds: int, console: Console) -> list[ClientResult]:
    """The first driver is ours: its failures end the run. A peer that fails is reported and
    left out of the remaining rounds."""
    results = [
        ClientResult(d.name, d.describe(), tuple(op for op in ops if d.supports(op)), {op: [] for op in ops if d.supports(op)})
        for d in drivers
    ]
    progress = console.progress
    # One untimed (but verified) round first: connections open, the server's allocator and
    # every page warm up. Its samples are dropped.
    for round_index in [WARMUP_ROUND, *range(rounds)]:
        shift = 0 if round_index == WARMUP_ROUND else round_index % len(drivers)
        order = list(range(len(drivers)))[shift:] + list(range(len(drivers)))[:shift]
        for i in order:
            driver, result = drivers[i], results[i]
            if result.failure is None:
                step = "warm-up" if round_index == WARMUP_ROUND else f"round {round_index + 1}/{rounds}"
                progress.start(f"{step}: {driver.name}")
                try:
                    samples = driver.run_round(round_index, ops)
                except PeerFailed as exc:
                    if i == 0:
                        raise
                    result.failure = " ".join(str(exc).split())  # one line in the table
                    console.warn(f"peer {driver.name} hung/failed in the {round_label(round_index)}: {exc}")
                else:
                    if round_index != WARMUP_ROUND:
                        for op, sample in samples.items():
                            result.samples[op].append(sample)
            progress.advance()
    return results
