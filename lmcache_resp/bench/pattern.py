"""The bytes each key holds in each round, and how to check them.

Depends on numpy only: the LMCache peer's driver runs in another interpreter, without
lmcache_resp, and loads this file by path so both sides write exactly the same data.

Every (seed, round, key) gets its own SFC64 stream: distinct per key and per round, so a GET
that returns another key's value, last round's value or nothing at all is caught. SFC64's raw
output runs at several GB/s, so filling and checking 2 GB costs well under a second.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["LATENCY_ROUND", "POISON", "WARMUP_ROUND", "expected", "fill", "first_difference", "poison"]

Bytes = npt.NDArray[np.uint8]

# The latency pass writes its own data, apart from every throughput round.
LATENCY_ROUND = 1 << 30
# So does the untimed warm-up round before the timed ones.
WARMUP_ROUND = 1 << 29
# Pages are set to this before a GET, so a GET that reports a hit without writing is caught.
POISON = 0


def expected(length: int, seed: int, round_index: int, key_index: int) -> Bytes:
    """The ``length`` bytes key ``key_index`` holds in round ``round_index``."""
    words = (length + 7) // 8
    raw = np.random.SFC64([seed, round_index, key_index]).random_raw(words)
    return np.asarray(raw, dtype=np.uint64).view(np.uint8)[:length]


def fill(buffer: Bytes, seed: int, round_index: int, key_index: int) -> None:
    buffer[:] = expected(len(buffer), seed, round_index, key_index)


def poison(buffer: Bytes) -> None:
    buffer.fill(POISON)


def first_difference(buffer: Bytes | bytes, seed: int, round_index: int, key_index: int, length: int) -> int | None:
    """None when ``buffer`` holds exactly what was written, else the first differing offset
    (the shorter length when only the lengths differ)."""
    actual = np.frombuffer(buffer, dtype=np.uint8) if isinstance(buffer, bytes) else buffer
    want = expected(length, seed, round_index, key_index)
    common = min(len(actual), length)
    if np.array_equal(actual[:common], want[:common]):
        return None if len(actual) == length else common
    return int(np.flatnonzero(actual[:common] != want[:common])[0])
