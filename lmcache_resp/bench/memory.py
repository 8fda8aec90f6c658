"""How much memory a run needs, and refusing one that would push the machine into swap or the
OOM killer (the page pool is pinned to one page per key)."""

from __future__ import annotations

from lmcache_resp.bench.options import SWEEP_POINT_CAP_BYTES, Options
from lmcache_resp.bench.units import GiB

__all__ = ["MEMORY_SHARE", "estimate_bytes", "mem_available", "memory_problem", "sweep_keys"]

MEMORY_SHARE = 0.6


def mem_available(meminfo: str = "/proc/meminfo") -> int | None:
    """MemAvailable in bytes, or None where the kernel does not say."""
    try:
        with open(meminfo) as lines:
            for line in lines:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def sweep_keys(num_keys: int, chunk_bytes: int) -> int:
    """Keys per sweep point: num_keys, capped so that one batch moves at most ~2 GiB."""
    return max(1, min(num_keys, SWEEP_POINT_CAP_BYTES // chunk_bytes))


def estimate_bytes(options: Options) -> int:
    """Peak bytes of this run on this machine: our page pool, the values a local server holds,
    and what each peer keeps (redis-py's GET results, the LMCache driver's own pool)."""
    if options.sweep:
        batch = max(sweep_keys(options.num_keys, c) * c for c in (*options.sweep_chunks, options.chunk_bytes))
    else:
        batch = options.pool_bytes
    copies = 1.0
    if options.embedded:
        copies += 1.1  # the server holds one client's values at a time, plus its own overhead
    copies += sum(1 for peer in options.compare if peer in ("redis-py", "lmcache"))
    return int(batch * copies)


def memory_problem(options: Options) -> str | None:
    """Why this run does not fit in memory, or None."""
    available = mem_available()
    if available is None:
        return None
    needed = estimate_bytes(options)
    if needed <= MEMORY_SHARE * available:
        return None
    return (
        f"this run needs about {needed / GiB:.1f} GiB (--num-keys {options.num_keys} x --chunk-mb "
        f"{options.chunk_bytes / (1 << 20):g} = {options.pool_bytes / GiB:.2f} GiB of pages"
        f"{', a local server holding them' if options.embedded else ''}"
        f"{', peers keeping their own copies' if any(p in ('redis-py', 'lmcache') for p in options.compare) else ''}), "
        f"more than {MEMORY_SHARE:.0%} of MemAvailable ({available / GiB:.1f} GiB): lower --num-keys or --chunk-mb"
    )
