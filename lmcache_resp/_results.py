"""Per-key batch results: what a native batch hands back, and how failures are raised."""

from __future__ import annotations

from collections.abc import Sequence

from lmcache_resp.errors import BatchError

__all__ = ["hits", "lmcache_tuple", "raise_failures", "summarize"]

# What the native layer returns per key: GET -> int (bytes received) or None (miss);
# SET -> None; EXISTS/DELETE -> bool; a failed key -> the exception instance.
KeyValue = int | bool | None | BaseException


def failures(values: Sequence[KeyValue]) -> list[tuple[int, BaseException]]:
    return [(i, v) for i, v in enumerate(values) if isinstance(v, BaseException)]


def summarize(failed: list[tuple[int, BaseException]], total: int) -> str:
    shown = "; ".join(f"key {i}: {type(e).__name__}: {e}" for i, e in failed[:3])
    more = f"; and {len(failed) - 3} more" if len(failed) > 3 else ""
    return f"{len(failed)} of {total} keys failed: {shown}{more}"


def raise_failures(op: str, values: Sequence[KeyValue]) -> None:
    """Raises BatchError (caused by the first failure) if any key failed."""
    failed = failures(values)
    if failed:
        raise BatchError(f"{op}: {summarize(failed, len(values))}", list(values)) from failed[0][1]


def hits(values: Sequence[KeyValue]) -> list[bool]:
    """GET values as hit flags (assumes failures were raised already)."""
    return [v is not None for v in values]


def lmcache_tuple(future_id: int, op: str, values: Sequence[KeyValue]) -> tuple[int, bool, str, list[bool] | None]:
    """LMCache's completion ``(future_id, ok, error, per_key)``; a miss is not a failure."""
    failed = failures(values)
    error = summarize(failed, len(values)) if failed else ""
    if op == "set":
        per_key = None
    elif op == "get":
        per_key = [isinstance(v, int) and not isinstance(v, bool) for v in values]
    else:
        per_key = [v is True for v in values]
    return future_id, not failed, error, per_key
