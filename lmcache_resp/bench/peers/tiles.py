"""Splitting key indices into one contiguous tile per worker."""

from __future__ import annotations

__all__ = ["tiles"]


def tiles(count: int, workers: int) -> list[range]:
    """``workers`` contiguous, nearly equal ranges covering 0..count-1 (empty ones dropped)."""
    workers = max(1, min(workers, count))
    base, extra = divmod(count, workers)
    out, start = [], 0
    for w in range(workers):
        size = base + (1 if w < extra else 0)
        out.append(range(start, start + size))
        start += size
    return [t for t in out if len(t)]
