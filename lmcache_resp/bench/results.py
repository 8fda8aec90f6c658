"""Everything one run measured, handed to the text and JSON reports."""

from __future__ import annotations

from dataclasses import dataclass, field

from lmcache_resp.bench.ceiling import CeilingProbe
from lmcache_resp.bench.latency import LatencyStats
from lmcache_resp.bench.options import Options
from lmcache_resp.bench.rounds import ClientResult
from lmcache_resp.bench.sweep import SweepResult
from lmcache_resp.bench.target import Target

__all__ = ["RunResult"]


@dataclass
class RunResult:
    options: Options
    target: Target
    key_prefix: str
    clients: list[ClientResult] = field(default_factory=list)  # lmcache_resp first, then the peers
    unavailable: dict[str, str] = field(default_factory=dict)  # peer -> why it could not run
    latency: dict[str, LatencyStats] | None = None
    ceiling: list[CeilingProbe] | None = None
    sweep: SweepResult | None = None
    # What lmcache_resp read back and had verified byte for byte.
    verified_get_batches: int = 0
    verified_bytes: int = 0

    @property
    def ours(self) -> ClientResult | None:
        return self.clients[0] if self.clients else None
