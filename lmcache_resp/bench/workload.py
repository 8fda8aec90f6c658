"""The keys, their data per round, and the check of every GET against what was written.

Test hook: ``LMCACHE_RESP_BENCH_CORRUPT=KEY_INDEX:OFFSET`` flips that byte of that key's page
after each of lmcache_resp's GETs (before verification), to prove that a corrupted read fails
the run loudly.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from lmcache_resp.bench import pattern
from lmcache_resp.bench.errors import BenchError

__all__ = ["CORRUPT_ENV", "Mismatch", "VerificationError", "Workload", "round_label"]

CORRUPT_ENV = "LMCACHE_RESP_BENCH_CORRUPT"
# One EXISTS batch of 500 keys takes about a millisecond, so a single scheduling hiccup would
# decide the figure; each timed sample spans at least this many keys instead.
EXISTS_SAMPLE_KEYS = 5000


def round_label(round_index: int) -> str:
    if round_index == pattern.WARMUP_ROUND:
        return "warm-up round"
    if round_index == pattern.LATENCY_ROUND:
        return "latency pass"
    return f"round {round_index + 1}"


@dataclass(frozen=True)
class Mismatch:
    """One key whose GET did not give back what was written."""

    client: str
    round_label: str
    key: str
    reason: str
    offset: int | None = None

    def describe(self) -> str:
        where = f" at byte offset {self.offset}" if self.offset is not None else ""
        return f"{self.client}, {self.round_label}: key {self.key!r}: {self.reason}{where}"


class VerificationError(Exception):
    """Data read back differs from what was written. Never a warning: the run fails (exit 1)."""

    def __init__(self, mismatches: list[Mismatch]) -> None:
        self.mismatches = mismatches
        shown = "; ".join(m.describe() for m in mismatches[:5])
        more = f" (and {len(mismatches) - 5} more)" if len(mismatches) > 5 else ""
        super().__init__(f"{len(mismatches)} key(s) read back wrong: {shown}{more}")


@dataclass(frozen=True)
class Workload:
    keys: list[str]
    chunk_bytes: int
    seed: int

    @property
    def batch_bytes(self) -> int:
        return len(self.keys) * self.chunk_bytes

    @property
    def exists_repeat(self) -> int:
        """EXISTS batches per timed sample, the same for every client."""
        return max(1, -(-EXISTS_SAMPLE_KEYS // max(1, len(self.keys))))

    def fill(self, buffers: Sequence[pattern.Bytes], round_index: int) -> None:
        for key_index, buffer in enumerate(buffers):
            pattern.fill(buffer, self.seed, round_index, key_index)

    @staticmethod
    def poison(buffers: Sequence[pattern.Bytes]) -> None:
        for buffer in buffers:
            pattern.poison(buffer)

    def verify(
        self, client: str, round_index: int, read: Sequence[pattern.Bytes | bytes | None], miss_note: str = ""
    ) -> list[Mismatch]:
        """Every value read (None for a miss) against what key i holds in this round. ``miss_note``
        says what a miss may mean besides a lost value (a replica that had not caught up)."""
        label = round_label(round_index)
        mismatches = []
        miss = "GET reported a miss for a key just written" + (f" ({miss_note})" if miss_note else "")
        for key_index, value in enumerate(read):
            key = self.keys[key_index]
            if value is None:
                mismatches.append(Mismatch(client, label, key, miss))
                continue
            offset = pattern.first_difference(value, self.seed, round_index, key_index, self.chunk_bytes)
            if offset is not None:
                reason = (f"{len(value)} bytes read, {self.chunk_bytes} written" if len(value) != self.chunk_bytes
                          else "bytes differ from what was written")
                mismatches.append(Mismatch(client, label, key, reason, offset))
        return mismatches

    def check(
        self, client: str, round_index: int, buffers: Sequence[pattern.Bytes], hits: Sequence[bool], miss_note: str = ""
    ) -> None:
        """Verifies lmcache_resp's pages after a GET (the test hook applied first)."""
        _apply_test_corruption(buffers)
        mismatches = self.verify(client, round_index, [b if h else None for b, h in zip(buffers, hits)], miss_note)
        if mismatches:
            raise VerificationError(mismatches)


def _apply_test_corruption(buffers: Sequence[pattern.Bytes]) -> None:
    """The documented test hook (see the module docstring); a no-op unless the variable is set."""
    spec = os.environ.get(CORRUPT_ENV)
    if not spec:
        return
    key_text, _, offset_text = spec.partition(":")
    try:
        key_index, offset = int(key_text), int(offset_text or 0)
    except ValueError:
        raise BenchError(f"{CORRUPT_ENV} must be KEY_INDEX:OFFSET (a test hook), got {spec!r}") from None
    if 0 <= key_index < len(buffers) and 0 <= offset < len(buffers[key_index]):
        buffers[key_index][offset] ^= np.uint8(0xFF)
