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
# (label, pairs, unix socket)
PROBES = (("TCP loopback, 1 pair", 1, False), ("TCP loopback, 2 pairs", 2, False), ("Unix socket, 2 pairs", 2, True))
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


def measure_ceiling(block_bytes: int, total_bytes: int = CEILING_TOTAL_BYTES) -> list[CeilingProbe]:
    # Looked up, not imported: older builds have no probe, and the run says so (exit 2).
    probe: Callable[..., dict[str, Any]] | None = getattr(_native, "loopback_ceiling", None)
    if probe is None:
        raise BenchError(
            "--ceiling: this lmcache_resp build has no _native.loopback_ceiling yet; rebuild lmcache_resp "
            "(maturin develop --release) once it is in, or run without --ceiling"
        )
    out = []
    for label, pairs, unix in PROBES:
        r = probe(pairs, block_bytes, total_bytes, unix)
        out.append(CeilingProbe(label, pairs, unix, float(r["gb_per_s"]), float(r["seconds"]), int(r["bytes"]),
                                float(r["cpu_seconds"])))
    return out


def reference(probes: list[CeilingProbe]) -> CeilingProbe:
    return next(p for p in probes if p.label == REFERENCE_LABEL)
