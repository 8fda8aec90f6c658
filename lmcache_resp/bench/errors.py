"""What can stop a benchmark run, and how each is told apart."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BenchError", "Mismatch", "PeerFailed", "VerificationError"]


class BenchError(Exception):
    """Something the user can fix: a configuration that does not fit, a missing tool, an
    unreachable server. The CLI prints it and exits with status 2."""


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
    """Data read back differs from what was written. Never a warning: the run fails."""

    def __init__(self, mismatches: list[Mismatch]) -> None:
        self.mismatches = mismatches
        shown = "; ".join(m.describe() for m in mismatches[:5])
        more = f" (and {len(mismatches) - 5} more)" if len(mismatches) > 5 else ""
        super().__init__(f"{len(mismatches)} key(s) read back wrong: {shown}{more}")


class PeerFailed(Exception):
    """A peer hung or failed: the comparison reports it and goes on without that peer."""
