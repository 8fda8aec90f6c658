"""What this host has: its memory, as the kernel reports it (for the benchmark's memory checks)."""

from __future__ import annotations

__all__ = ["meminfo_bytes"]


def meminfo_bytes(field: str, meminfo: str = "/proc/meminfo") -> int | None:
    """A /proc/meminfo field (``MemAvailable``, ``MemTotal``) in bytes, or None where the kernel
    does not say."""
    try:
        with open(meminfo) as lines:
            for line in lines:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
