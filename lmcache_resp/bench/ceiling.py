"""--ceiling: what the kernel's sockets move on this machine with no Redis in the path
(lmcache_resp._native.loopback_ceiling), to read our figures against."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lmcache_resp import _native
from lmcache_resp.bench.errors import BenchError

__all__ = ["CeilingProbe", "measure_ceiling", "reference"]

CEILING_TOTAL_BYTES = 2_000_000_000
# (label, pairs, unix socket, from memory): from memory, each side cycles through as many
# distinct blocks as the run's page pool holds (capped), so the copies run from and to DRAM as
# a store's do; otherwise one block is reused and stays in cache (the best case).
PROBES = (
    ("TCP loopback, 1 pair", 1, False, False),
    ("TCP loopback, 2 pairs", 2, False, False),
    ("Unix socket, 2 pairs", 2, True, False),
    ("TCP loopback, 2 pairs, from memory", 2, False, True),
)
WORKING_SET_CAP_BYTES = 1 << 30
# The transport Redis uses here: our figures are shown as a share of it.
REFERENCE_LABEL = "TCP loopback, 2 pairs"


@dataclass(frozen=True)
class CeilingProbe:
    label: str
    pairs: int
    unix: bool
    gb_per_s: float
    seconds: float
    bytes: int
    cpu_seconds: float
    # What sending and receiving cost apart (on loopback the sender also pays the kernel's
    # receive processing): the floor for a client's SET and GET.
    sender_cpu_seconds: float = 0.0
    receiver_cpu_seconds: float = 0.0
    working_set_bytes: int = 0


def measure_ceiling(
    block_bytes: int, total_bytes: int = CEILING_TOTAL_BYTES, pool_bytes: int = WORKING_SET_CAP_BYTES
) -> list[CeilingProbe]:
    # Looked up, not imported: older builds have no probe, and the run says so (exit 2).
    probe: Callable[..., dict[str, Any]] | None = getattr(_native, "loopback_ceiling", None)
    if probe is None:
        raise BenchError(
            "--ceiling: this lmcache_resp build has no _native.loopback_ceiling yet; rebuild lmcache_resp "
            "(maturin develop --release) once it is in, or run without --ceiling"
        )
    out = []
    for label, pairs, unix, from_memory in PROBES:
        # Split over the pairs: both sides of all pairs together touch about the pool's bytes.
        working_set = min(pool_bytes, WORKING_SET_CAP_BYTES) // (2 * pairs) if from_memory else 0
        r = probe(pairs, block_bytes, total_bytes, unix, working_set)
        out.append(CeilingProbe(label, pairs, unix, float(r["gb_per_s"]), float(r["seconds"]), int(r["bytes"]),
                                float(r["cpu_seconds"]), float(r.get("sender_cpu_seconds", 0.0)),
                                float(r.get("receiver_cpu_seconds", 0.0)), working_set))
    return out


def reference(probes: list[CeilingProbe]) -> CeilingProbe:
    return next(p for p in probes if p.label == REFERENCE_LABEL)
