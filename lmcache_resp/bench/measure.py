"""How clients are measured side by side: one timed batch (wall and CPU seconds), the rounds of
the same workload for every client on the same server, and the medians reported over them."""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from lmcache_resp.bench.errors import PeerFailed
from lmcache_resp.bench.console import GB, Console
from lmcache_resp.bench.pattern import WARMUP_ROUND
from lmcache_resp.bench.workload import round_label

__all__ = ["PAYLOAD_OPS", "ClientResult", "Driver", "OpSample", "cpu_seconds", "run_rounds", "timed"]

T = TypeVar("T")
# Ops that move values: rated in GB/s of payload; the others in keys per second.
PAYLOAD_OPS = ("set", "get")


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
        if self.op in PAYLOAD_OPS:
            return self.payload_bytes / self.seconds / GB
        return self.keys / self.seconds


def cpu_seconds(who: int = resource.RUSAGE_SELF) -> float:
    """user+sys CPU seconds of this process, all its threads (the Rust I/O threads too); of its
    finished children with RUSAGE_CHILDREN."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def timed(op: str, keys: int, payload_bytes: int, call: Callable[[], T]) -> tuple[OpSample, T]:
    cpu_before = cpu_seconds()
    started = time.perf_counter()
    result = call()
    seconds = time.perf_counter() - started
    cpu = cpu_seconds() - cpu_before
    return OpSample(op, max(seconds, 1e-9), keys, payload_bytes, cpu), result


class Driver(Protocol):
    """A client measured side by side: one round of the workload at a time."""

    name: str

    @property
    def supported_ops(self) -> tuple[str, ...]: ...

    def describe(self) -> str:
        """One line: the client, its version and how it is driven."""
        ...

    def run_round(self, round_index: int, ops: Sequence[str]) -> dict[str, OpSample]:
        """Writes this round's data for every key (SET always runs: GET and EXISTS need it), runs
        the timed ops in order, verifies every GET (where the client lets it read the bytes), and
        deletes its keys. Returns a sample per op it timed; those not asked for are dropped.
        Peers raise PeerFailed when they hang or fail."""
        ...

    def close(self) -> None: ...


@dataclass
class ClientResult:
    name: str
    description: str
    ops: tuple[str, ...]
    samples: dict[str, list[OpSample]] = field(default_factory=dict)
    failure: str | None = None

    def median(self, op: str) -> float | None:
        samples = self.samples.get(op, [])
        return statistics.median(s.rate for s in samples) if samples else None

    def cpu_per_gb(self, op: str) -> float | None:
        """Client CPU seconds per GB of payload over all samples (None without CPU figures)."""
        samples = self.samples.get(op, [])
        moved = sum(s.payload_bytes for s in samples)
        if not samples or moved == 0 or any(s.cpu_seconds is None for s in samples):
            return None
        return sum(s.cpu_seconds or 0.0 for s in samples) / (moved / GB)


def run_rounds(drivers: Sequence[Driver], ops: Sequence[str], rounds: int, console: Console) -> list[ClientResult]:
    """In each round every client in turn, the order rotating per round so that none always runs
    on the warmest server. The first driver is ours: its failures end the run. A peer that fails
    is reported and left out of the remaining rounds."""
    results = []
    for d in drivers:
        supported = tuple(op for op in ops if op in d.supported_ops)
        results.append(ClientResult(d.name, d.describe(), supported, {op: [] for op in supported}))
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
                            if op in result.samples:
                                result.samples[op].append(sample)
            progress.advance()
    return results
