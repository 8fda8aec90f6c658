"""Everything one run measured, and how it is shown: the human-readable report (LMCache's
``Batch SET: X GB/s`` lines first, then rounds, latency, CPU cost, peers side by side, the sweep
tables, the ceiling and the neighbour flood) and the --json document (every round's samples;
never the password)."""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from lmcache_resp.stats import Stats
from lmcache_resp import __version__
from lmcache_resp.bench.ceiling import CeilingProbe, reference
from lmcache_resp.bench.options import Options
from lmcache_resp.bench.console import GB, MiB, UNITS_NOTE, format_size, table_lines
from lmcache_resp.bench.flood import PROBE_GAP_S, FloodResult
from lmcache_resp.bench.measure import PAYLOAD_OPS, ClientResult
from lmcache_resp.bench.ours import LatencyStats
from lmcache_resp.bench.sweep import KNEE_SHARE, SweepPoint, SweepResult
from lmcache_resp.bench.target import Target
from lmcache_resp.bench.workload import Mismatch

__all__ = [
    "RunResult",
    "failure_json",
    "flood_lines",
    "header_lines",
    "json_base",
    "peers_that_never_ran",
    "result_json",
    "standard_lines",
    "sweep_lines",
    "verified_line",
]

OP_LABELS = {"set": "SET", "get": "GET", "exists": "EXISTS", "delete": "DELETE"}
SCHEMA = "lmcache-resp-bench/1"
UNITS = {
    "set": "GB/s", "get": "GB/s", "exists": "ops/s", "delete": "ops/s",
    "GB": "1e9 bytes of payload", "latency": "milliseconds", "cpu_per_gb": "CPU seconds (user+sys) per GB of payload",
    "note": UNITS_NOTE,
}


@dataclass
class RunResult:
    options: Options
    target: Target
    key_prefix: str
    clients: list[ClientResult] = field(default_factory=list)  # lmcache_resp first, then the peers
    latency: dict[str, LatencyStats] | None = None
    ceiling: list[CeilingProbe] | None = None
    sweep: SweepResult | None = None
    neighbour_flood: list[FloodResult] | None = None  # the bridge's fleet first
    # What lmcache_resp read back and had verified byte for byte.
    verified_get_batches: int = 0
    verified_bytes: int = 0
    # lmcache_resp's counters over the run (Stats.to_dict(), docs/observability.md).
    stats: dict[str, Any] | None = None

    @property
    def ours(self) -> ClientResult | None:
        return self.clients[0] if self.clients else None


# -- the human-readable report ---------------------------------------------------------------


def header_lines(options: Options, target: Target) -> list[str]:
    if options.lmcache_l2:
        return [target.header_line(), target.io_loop_line()]  # lmcache_l2.py says the rest
    if options.sweep:
        workload = (f"sweep: chunk sizes {', '.join(format_size(c) for c in sorted(set(options.sweep_chunks)))} at "
                    f"{options.num_workers} workers; workers {', '.join(map(str, sorted(set(options.sweep_workers))))} at "
                    f"{format_size(options.chunk_bytes)}; up to {options.num_keys} keys per batch; {_plural(options.rounds, 'round')} per point after an untimed warm-up")
    elif options.neighbour_flood:
        workload = (f"workload: neighbour flood, {options.clients} client processes of {options.num_keys} keys x "
                    f"{format_size(options.chunk_bytes)}: client 0 times one-key EXISTS calls {PROBE_GAP_S * 1e3:g} ms "
                    f"apart, quiet and while {_flooders(options.clients)} {_flood_verb(options.clients)} in a loop "
                    f"for {options.flood_seconds:g} s; through one bridge (share {options.client_inflight_mib:g} MiB "
                    f"in flight per client), then with a store per process; {options.num_workers} I/O workers per engine")
    elif options.bridge:
        workload = (f"workload: {options.clients} client processes, each {options.num_keys} keys x {format_size(options.chunk_bytes)} "
                    f"per batch, all at once; {options.num_workers} I/O workers per engine, {_plural(options.rounds, 'round')} "
                    f"after an untimed warm-up, ops {','.join(options.ops)}; rates are the host's aggregate")
    else:
        workload = (f"workload: {options.num_keys} keys x {format_size(options.chunk_bytes)} = {options.pool_bytes / GB:.3f} GB per "
                    f"batch (all keys in ONE call), {_workers(options)}, {_plural(options.rounds, 'round')} after an untimed warm-up, ops "
                    f"{','.join(options.ops)}")
    return [target.header_line(), target.io_loop_line(), workload, UNITS_NOTE]


def _workers(options: Options) -> str:
    """The I/O workers: ``8 I/O workers``, or with --ours-shape ``lmcache_resp 2 I/O workers x 4
    connections, the peers 8 threads``."""
    if options.ours_shape is None:
        return options.ours_shape_text()
    return f"lmcache_resp {options.ours_shape_text()}, the peers {options.num_workers} threads"


def peers_that_never_ran(result: RunResult) -> list[tuple[str, str]]:
    """``(name, why)`` of each peer asked for with --compare that failed before it measured
    anything: the comparison asked for did not happen."""
    return [(c.name, c.failure or "") for c in result.clients[1:]
            if c.name in result.options.compare and c.failure and not any(c.samples.values())]


def standard_lines(result: RunResult) -> list[str]:
    return _ours_lines(result) + _compare_lines(result) + _ceiling_lines(result)


def _ours_lines(result: RunResult) -> list[str]:
    """Exactly LMCache's lines first (``Batch SET: X GB/s`` ..., medians over rounds), then
    every round, the latency pass and the CPU cost."""
    ours = result.ours
    if ours is None:
        return []
    lines = []
    for op in result.options.ops:
        value = ours.median(op)
        shown = "n/a" if value is None else f"{value:.2f} GB/s" if op in PAYLOAD_OPS else f"{value:.0f} ops/s"
        lines.append(f"Batch {OP_LABELS[op]}: {shown}")
    for op in result.options.ops:
        samples = " ".join(_cell(op, s.rate) for s in ours.samples.get(op, []))
        lines.append(f"  {OP_LABELS[op]:6s} rounds: {samples} {_unit(op)}")
    if result.latency:
        parts = [f"{OP_LABELS[s.op]} p50 {s.p50_ms:.3f} p99 {s.p99_ms:.3f}" for s in result.latency.values()]
        count = next(iter(result.latency.values())).count
        lines.append(f"latency, ms ({count} single-key batches per op, timed one by one): " + "; ".join(parts))
    cpu = _cpu_parts(ours)
    if cpu:
        whose = ("every client process and the bridge" if result.options.bridge
                 else "this process, Rust I/O threads included")
        lines.append(f"client CPU, seconds per GB (user+sys of {whose}; the server not counted): " + ", ".join(cpu))
    if result.stats is not None:
        lines.append("lmcache_resp stats: " + Stats(result.stats).summary())
    return lines


def _compare_lines(result: RunResult) -> list[str]:
    if len(result.clients) < 2:
        return []
    ours, peers = result.clients[0], result.clients[1:]
    lines = ["", f"side by side: same workload, same server, {_plural(result.options.rounds, 'round')}, order rotating per round "
                 f"(medians; ratio = {ours.name} / peer)"]
    for client in result.clients:
        lines.append(f"  {client.name}: {client.description}")
    for peer in peers:
        if peer.failure:
            lines.append(f"  {peer.name}: hung/failed: {peer.failure}")
    rows = [["op", ours.name, *(p.name for p in peers), *(f"vs {p.name}" for p in peers)]]
    for op in result.options.ops:
        mine = ours.median(op)
        theirs = [p.median(op) if op in p.ops else None for p in peers]
        rows.append([f"{OP_LABELS[op]} ({_unit(op)})", _cell(op, mine),
                     *(_cell(op, v) if op in p.ops else "n/a" for p, v in zip(peers, theirs)),
                     *(f"{mine / v:.2f}x" if mine and v else "n/a" for v in theirs)])
    lines += table_lines(rows, numbers_right=False)
    cpu = [f"{client.name} {', '.join(parts)}" for client in result.clients if (parts := _cpu_parts(client))]
    if cpu:
        lines.append("  client CPU, seconds per GB: " + "; ".join(cpu))
    return lines


def _ceiling_lines(result: RunResult) -> list[str]:
    if not result.ceiling:
        return []
    probes = result.ceiling
    block = format_size(result.options.chunk_bytes)
    lines = ["", f"ceiling (no Redis in the path; {block} blocks, {probes[0].bytes / GB:.1f} GB per probe):"]
    for p in probes:
        gb = max(p.bytes / GB, 1e-9)
        lines.append(
            f"  {p.label}: {p.gb_per_s:.2f} GB/s ({p.cpu_seconds / gb:.3f} CPU s/GB: sending "
            f"{p.sender_cpu_seconds / gb:.3f}, receiving {p.receiver_cpu_seconds / gb:.3f})"
        )
    ref = reference(probes)
    ours = result.ours
    if ours is not None:
        shares = [f"Batch {OP_LABELS[op]} {100 * v / ref.gb_per_s:.0f}%" for op in PAYLOAD_OPS
                  if op in result.options.ops and (v := ours.median(op)) is not None]
        unix = next((p for p in probes if p.unix), None)
        lines.append(f"  share of the {ref.label} ceiling ({ref.gb_per_s:.2f} GB/s): " + ", ".join(shares)
                     + (f" (a Unix socket moves {unix.gb_per_s:.2f} GB/s)" if unix else ""))
    return lines


def sweep_lines(result: RunResult) -> list[str]:
    sweep = result.sweep
    if sweep is None:
        return []
    lines = []
    if sweep.by_chunk:
        lines += ["", f"throughput against chunk size, {sweep.by_chunk[0].num_workers} I/O workers (medians):"]
        lines += _sweep_table(sweep.by_chunk, "chunk", lambda p: format_size(p.chunk_bytes))
        k = sweep.chunk_knee
        if k is not None:
            best = max(sweep.by_chunk, key=lambda p: p.get_gbps)
            lines.append(f"  knee: {format_size(k.chunk_bytes)} is the smallest chunk reaching {KNEE_SHARE:.0%} of the best "
                         f"GET ({best.get_gbps:.3f} GB/s at {format_size(best.chunk_bytes)})")
    if sweep.by_workers:
        lines += ["", f"throughput against I/O workers, {format_size(sweep.by_workers[0].chunk_bytes)} chunks (medians):"]
        lines += _sweep_table(sweep.by_workers, "workers", lambda p: str(p.num_workers))
        k = sweep.workers_knee
        if k is not None:
            best = max(sweep.by_workers, key=lambda p: p.get_gbps)
            lines.append(f"  knee: {k.num_workers} workers is the fewest reaching {KNEE_SHARE:.0%} of the best GET "
                         f"({best.get_gbps:.3f} GB/s at {best.num_workers} workers)")
    if any(p.capped for p in sweep.points):
        lines.append("  (capped): fewer keys than --num-keys, so that one batch moves at most ~2 GiB")
    return lines


def _sweep_table(points: list[SweepPoint], first: str, label: Callable[[SweepPoint], str]) -> list[str]:
    rows = [[first, "keys", "GB per batch", "SET GB/s", "GET GB/s"]]
    for p in points:
        rows.append([label(p), f"{p.keys}{' (capped)' if p.capped else ''}", f"{p.keys * p.chunk_bytes / GB:.3f}",
                     f"{p.set_gbps:.3f}", f"{p.get_gbps:.3f}"])
    return table_lines(rows, numbers_right=True)


def flood_lines(result: RunResult) -> list[str]:
    floods = result.neighbour_flood
    if not floods:
        return []
    k = floods[0].clients
    lines = ["", f"neighbour flood: client 0's one-key EXISTS latency (ms), quiet and while {_flooders(k)} "
                 f"{_flood_verb(k)} in a loop; flood GB/s = the flooders' aggregate"]
    for f in floods:
        lines.append(f"  {f.name}: {f.description}")
    rows = [["mode", "quiet p50", "quiet p99", "flooded p50", "flooded p99", "samples", "flood GB/s", "p99 ratio",
             "share", "one share, ms", "added p99, shares"]]
    for f in floods:
        share_ms, added = f.share_ms, f.added_p99_shares
        rows.append([f.name, f"{f.quiet.p50_ms:.3f}", f"{f.quiet.p99_ms:.3f}", f"{f.flooded.p50_ms:.3f}",
                     f"{f.flooded.p99_ms:.3f}", f"{f.quiet.count}/{f.flooded.count}", f"{f.flood_gbps:.3f}",
                     f"{f.p99_ratio:.2f}x", format_size(f.share_bytes) if f.share_bytes else "-",
                     "-" if share_ms is None else f"{share_ms:.3f}", "-" if added is None else f"{added:.2f}"])
    lines += table_lines(rows, numbers_right=True)
    lines.append("  p99 ratio = flooded p99 / quiet p99; samples = quiet/flooded; share = the most one client has in "
                 "flight through the bridge (served round-robin); one share, ms = a share at the measured flood rate; "
                 "added p99 = (flooded p99 - quiet p99) in shares: about 1 or less is what round-robin promises")
    batch = result.options.pool_bytes
    share = next((f.share_bytes for f in floods if f.share_bytes), None)
    if share is not None and batch <= share:
        lines.append(f"  note: a flooder's batch ({format_size(batch)}) is no larger than the share ({format_size(share)}): "
                     f"the bridge's cap never holds a flooder back (a larger --num-keys puts it to work)")
    return lines


def _flooders(clients: int) -> str:
    return "client 1" if clients == 2 else f"clients 1..{clients - 1}"


def _flood_verb(clients: int) -> str:
    return "SETs its batch" if clients == 2 else "SET their batches"


def verified_line(result: RunResult) -> str:
    if result.neighbour_flood:
        return (f"verified: every byte lmcache_resp read back ({result.verified_get_batches} GET batches, every "
                f"client's keys after each flood, {result.verified_bytes / GB:.3f} GB) matched what was written")
    latency = " and the latency pass" if result.latency and "get" in result.latency else ""
    return (f"verified: every byte lmcache_resp read back ({result.verified_get_batches} GET batches including "
            f"warm-ups{latency}, {result.verified_bytes / GB:.3f} GB) matched what was written")


def _unit(op: str) -> str:
    return "GB/s" if op in PAYLOAD_OPS else "ops/s"


def _cell(op: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f}" if op in PAYLOAD_OPS else f"{value:,.0f}"


def _cpu_parts(client: ClientResult) -> list[str]:
    return [f"{OP_LABELS[op]} {v:.3f}" for op in PAYLOAD_OPS if op in client.ops and (v := client.cpu_per_gb(op)) is not None]


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


# -- the --json document ---------------------------------------------------------------------


def result_json(result: RunResult) -> dict[str, Any]:
    doc = json_base(result.options)
    ours = result.ours
    doc.update(
        server=result.target.describe(),
        key_prefix=result.key_prefix,
        verified=True,
        verified_get_batches=result.verified_get_batches,
        verified_bytes=result.verified_bytes,
        results={op: ours.median(op) for op in result.options.ops} if ours and not result.sweep else {},
        clients=[_client_json(c) for c in result.clients],
        latency_ms={op: asdict(s) for op, s in result.latency.items()} if result.latency else None,
        ceiling=[asdict(p) for p in result.ceiling] if result.ceiling else None,
        sweep=None,
        neighbour_flood=_flood_json(result.neighbour_flood) if result.neighbour_flood else None,
        stats=result.stats,
    )
    if result.sweep is not None:
        s = result.sweep
        doc["sweep"] = {
            "knee_share": KNEE_SHARE,
            "by_chunk": [_point_json(p) for p in s.by_chunk],
            "by_workers": [_point_json(p) for p in s.by_workers],
            "chunk_knee_bytes": s.chunk_knee.chunk_bytes if s.chunk_knee else None,
            "workers_knee": s.workers_knee.num_workers if s.workers_knee else None,
        }
    return doc


def failure_json(options: Options, error: str, mismatches: list[Mismatch] | None = None) -> dict[str, Any]:
    doc = json_base(options)
    doc.update(verified=False, error=error, mismatches=[asdict(m) for m in mismatches or []])
    return doc


def json_base(options: Options) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "lmcache_resp": __version__,
        "python": platform.python_version(),
        "units": UNITS,
        "config": {
            "chunk_bytes": options.chunk_bytes,
            "num_keys": options.num_keys,
            "num_workers": options.num_workers,
            "ours_shape": list(options.ours_shape) if options.ours_shape else None,
            "rounds": options.rounds,
            "ops": list(options.ops),
            "timeout_s": options.timeout,
            "cpu_affinity": options.cpu_affinity,
            "compare": list(options.compare),
            "sweep": options.sweep,
            "seed": options.seed,
            "bridge": options.bridge,
            "clients": options.clients,
            "client_inflight_mib": options.client_inflight_mib,
            "neighbour_flood": options.neighbour_flood,
            "flood_seconds": options.flood_seconds if options.neighbour_flood else None,
            "regime": options.regime if options.embedded else None,
        },
    }


def _client_json(client: ClientResult) -> dict[str, Any]:
    return {
        "name": client.name,
        "description": client.description,
        "failure": client.failure,
        "ops": {
            op: {
                "median": client.median(op),
                "unit": UNITS[op],
                "samples": [s.rate for s in samples],
                "seconds": [s.seconds for s in samples],
                "cpu_seconds": [s.cpu_seconds for s in samples],
                "cpu_per_gb": client.cpu_per_gb(op),
            }
            for op, samples in client.samples.items()
        },
    }


def _flood_json(floods: list[FloodResult]) -> dict[str, Any]:
    def latency(stats: LatencyStats, seconds: list[float]) -> dict[str, Any]:
        return {**asdict(stats), "samples_ms": [s * 1e3 for s in seconds]}

    return {
        "probe": "one-key EXISTS by client 0", "probe_gap_s": PROBE_GAP_S, "flooders": floods[0].flooders,
        "modes": {
            f.mode: {
                "name": f.name,
                "description": f.description,
                "quiet": latency(f.quiet, f.run.quiet),
                "flooded": latency(f.flooded, f.run.flooded),
                "p99_ratio": f.p99_ratio,
                "flood_bytes": f.run.flood_bytes,
                "flood_seconds": f.run.flood_seconds,
                "flood_batches": f.run.flood_batches,
                "flood_gb_per_s": f.flood_gbps,
                "share_bytes": f.share_bytes,
                "share_mib": None if f.share_bytes is None else f.share_bytes / MiB,
                "share_ms": f.share_ms,
                "added_p99_shares": f.added_p99_shares,
            }
            for f in floods
        },
    }


def _point_json(p: SweepPoint) -> dict[str, Any]:
    return {
        "chunk_bytes": p.chunk_bytes, "num_workers": p.num_workers, "keys": p.keys, "capped": p.capped,
        "set_gb_per_s": p.set_gbps, "get_gb_per_s": p.get_gbps,
        "set_samples": [s.rate for s in p.result.samples.get("set", [])],
        "get_samples": [s.rate for s in p.result.samples.get("get", [])],
    }
