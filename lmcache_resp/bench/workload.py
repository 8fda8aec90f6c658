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
from lmcache_resp.bench.errors import BenchError, Mismatch

__all__ = ["CORRUPT_ENV", "Workload", "apply_test_corruption", "round_label"]

CORRUPT_ENV = "LMCACHE_RESP_BENCH_CORRUPT"


def round_label(round_index: int) -> str:
    if round_index == pattern.WARMUP_ROUND:
        return "warm-up round"
    if round_index == pattern.LATENCY_ROUND:
        return "latency pass"
    return f"round {round_index + 1}"


EXISTS_SAMPLE_KEYS = 5000


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
        """EXISTS batches per timed sample, for every client alike. One batch of 500 keys takes
        about a millisecond, so a single scheduling hiccup would decide the figure; the sample
        spans at least EXISTS_SAMPLE_KEYS keys instead."""
        return max(1, -(-EXISTS_SAMPLE_KEYS // max(1, len(self.keys))))

    def fill(self, buffers: Sequence[pattern.Bytes], round_index: int) -> None:
        for key_index, buffer in enumerate(buffers):
            pattern.fill(buffer, self.seed, round_index, key_index)

    @staticmethod
    def poison(buffers: Sequence[pattern.Bytes]) -> None:
        for buffer in buffers:
            pattern.poison(buffer)

    def verify(self, client: str, round_index: int, read: Sequence[pattern.Bytes | bytes | None]) -> list[Mismatch]:
        """Every value read (None for a miss) against what key i holds in this round."""
        label = round_label(round_index)
        mismatches = []
        for key_index, value in enumerate(read):
            key = self.keys[key_index]
            if value is None:
                mismatches.append(Mismatch(client, label, key, "GET reported a miss for a key just written"))
                continue
            offset = pattern.first_difference(value, self.seed, round_index, key_index, self.chunk_bytes)
            if offset is not None:
                reason = (f"{len(value)} bytes read, {self.chunk_bytes} written" if len(value) != self.chunk_bytes
                          else "bytes differ from what was written")
                mismatches.append(Mismatch(client, label, key, reason, offset))
        return mismatches


def apply_test_corruption(buffers: Sequence[pattern.Bytes]) -> None:
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
