"""Units, spelled out once: GB is 1e9 bytes of payload, sizes are binary (KiB, MiB)."""

from __future__ import annotations

__all__ = ["GB", "KiB", "MiB", "GiB", "UNITS_NOTE", "format_size", "mib_to_bytes"]

GB = 1e9
KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

UNITS_NOTE = (
    "units: GB = 1e9 bytes of payload (keys and protocol overhead not counted), GB/s = payload GB per "
    "second of wall time; ops/s = keys per second; chunk sizes in KiB/MiB (2^10/2^20 bytes); "
    "figures are medians over rounds"
)


def mib_to_bytes(mib: float) -> int:
    return int(round(mib * MiB))


def format_size(nbytes: int) -> str:
    """'256 KiB', '4 MiB', '1.5 MiB', '100 B'."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if nbytes >= size:
            value = nbytes / size
            return f"{value:g} {unit}" if value * 100 == int(value * 100) else f"{value:.2f} {unit}"
    return f"{nbytes} B"
