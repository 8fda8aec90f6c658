"""What every client measured side by side provides: one round of the workload at a time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from lmcache_resp.bench.samples import OpSample

__all__ = ["Driver"]


class Driver(Protocol):
    name: str

    def describe(self) -> str:
        """One line: the client, its version and how it is driven."""
        ...

    def supports(self, op: str) -> bool: ...

    def run_round(self, round_index: int, ops: Sequence[str]) -> dict[str, OpSample]:
        """Writes this round's data for every key (SET always runs: GET and EXISTS need it), runs
        the timed ops in order, verifies every GET (where the client lets it read the bytes), and
        deletes its keys (DELETE timed only when asked). Returns a sample per op asked for and
        supported. Peers raise PeerFailed when they hang or fail."""
        ...

    def close(self) -> None: ...
