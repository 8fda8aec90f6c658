"""``--bridge --clients K --neighbour-flood``: what one client's flood does to another client's
small batch, through one bridge and with a store per process.

For each mode a fleet of K processes (fleet.py): client 0 times one-key EXISTS calls of a key it
wrote, first with clients 1..K-1 idle, then while they SET their whole batches in a loop. The
bridge serves its clients round-robin, each with at most --client-inflight-mb of values in
flight (its share), so the flood should add at most about one share's worth of time to the
probe's latency; with independent stores the only thing the processes share is the server.
Every flooder's keys are read back and verified afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

from lmcache_resp.bench.console import GB, MiB, Console
from lmcache_resp.bench.fleet import MODES, FleetDriver, FloodRun
from lmcache_resp.bench.options import Options
from lmcache_resp.bench.ours import LatencyStats
from lmcache_resp.bench.target import KeyLedger, Target

__all__ = ["PROBE_GAP_S", "PROBE_SAMPLES", "FloodResult", "measure_neighbour_flood"]

PROBE_SAMPLES = 200
PROBE_GAP_S = 0.02
FLOOD_ROUND = 0  # the data pattern of the flood's values


@dataclass(frozen=True)
class FloodResult:
    mode: str
    name: str
    clients: int
    description: str
    quiet: LatencyStats
    flooded: LatencyStats
    run: FloodRun
    # The bridge's per-client bytes in flight; None for independent stores.
    share_bytes: int | None

    @property
    def flooders(self) -> int:
        return self.clients - 1

    @property
    def flood_gbps(self) -> float:
        return self.run.flood_bytes / max(self.run.flood_seconds, 1e-9) / GB

    @property
    def p99_ratio(self) -> float:
        return self.flooded.p99_ms / max(self.quiet.p99_ms, 1e-9)

    @property
    def share_ms(self) -> float | None:
        """How long one share takes at the flooders' measured aggregate rate."""
        if self.share_bytes is None or self.run.flood_bytes == 0:
            return None
        return self.share_bytes / (self.flood_gbps * GB) * 1e3

    @property
    def added_p99_shares(self) -> float | None:
        """What the flood added to the probe's p99, in shares."""
        share = self.share_ms
        return None if not share else (self.flooded.p99_ms - self.quiet.p99_ms) / share


def measure_neighbour_flood(options: Options, target: Target, ledger: KeyLedger, console: Console) -> list[FloodResult]:
    """The bridge's fleet, then the independent one (one at a time: only the server is shared)."""
    k = options.clients
    results = []
    console.progress.add_total(len(MODES))
    for mode in MODES:
        keys = [ledger.keys(f"flood-{mode}{k}-c{i}", options.num_keys) for i in range(k)]
        console.progress.start(f"neighbour flood: starting the {mode} fleet")
        fleet = FleetDriver(
            mode, k, target, keys, chunk_bytes=options.chunk_bytes, num_workers=options.num_workers,
            seed=options.seed, timeout=options.timeout, cpu_affinity=options.cpu_affinity,
            client_inflight_mib=options.client_inflight_mib,
        )
        try:
            console.progress.start(f"neighbour flood: {fleet.name}, {options.flood_seconds:g} s")
            run = fleet.neighbour_flood(FLOOD_ROUND, flood_seconds=options.flood_seconds,
                                        samples=PROBE_SAMPLES, gap=PROBE_GAP_S)
            description = fleet.describe()
        finally:
            fleet.close()
        share = int(options.client_inflight_mib * MiB) if mode == "bridge" else None
        results.append(FloodResult(mode, fleet.name, k, description, LatencyStats.of("exists", run.quiet),
                                   LatencyStats.of("exists", run.flooded), run, share))
        console.progress.advance()
    return results
