"""The human-readable report: LMCache's benchmark lines first (``Batch SET: X GB/s`` ...), then
latency, CPU cost, peers side by side, the sweep table and the ceiling."""

from __future__ import annotations

from lmcache_resp.bench.ceiling import reference
from lmcache_resp.bench.options import Options
from lmcache_resp.bench.results import RunResult
from lmcache_resp.bench.sweep import KNEE_SHARE, SweepPoint
from lmcache_resp.bench.units import GB, UNITS_NOTE, format_size

__all__ = ["batch_lines", "ceiling_lines", "compare_lines", "detail_lines", "sweep_lines", "workload_line"]

OP_LABELS = {"set": "SET", "get": "GET", "exists": "EXISTS", "delete": "DELETE"}


def workload_line(options: Options) -> str:
    if options.sweep:
        return (f"sweep: chunk sizes {', '.join(format_size(c) for c in sorted(set(options.sweep_chunks)))} at "
                f"{options.num_workers} workers; workers {', '.join(map(str, sorted(set(options.sweep_workers))))} at "
                f"{format_size(options.chunk_bytes)}; up to {options.num_keys} keys per batch; {_plural(options.rounds, 'round')} per point after an untimed warm-up")
    return (f"workload: {options.num_keys} keys x {format_size(options.chunk_bytes)} = {options.pool_bytes / GB:.3f} GB per "
            f"batch (all keys in ONE call), {options.num_workers} I/O workers, {_plural(options.rounds, 'round')} after an untimed warm-up, ops "
            f"{','.join(options.ops)}")


def units_line() -> str:
    return UNITS_NOTE


def _batch_value(op: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f} GB/s" if op in ("set", "get") else f"{value:.0f} ops/s"


def batch_lines(result: RunResult) -> list[str]:
    """Exactly LMCache's lines: ``Batch SET: X GB/s`` ... (medians over rounds)."""
    ours = result.ours
    if ours is None:
        return []
    return [f"Batch {OP_LABELS[op]}: {_batch_value(op, ours.median(op))}" for op in result.options.ops]


def detail_lines(result: RunResult) -> list[str]:
    ours = result.ours
    if ours is None:
        return []
    lines = []
    for op in result.options.ops:
        samples = " ".join(_cell(op, s.rate) for s in ours.samples.get(op, []))
        unit = "GB/s" if op in ("set", "get") else "ops/s"
        lines.append(f"  {OP_LABELS[op]:6s} rounds: {samples} {unit}")
    if result.latency:
        parts = [f"{OP_LABELS[s.op]} p50 {s.p50_ms:.3f} p99 {s.p99_ms:.3f}" for s in result.latency.values()]
        count = next(iter(result.latency.values())).count
        lines.append(f"latency, ms ({count} single-key batches per op, timed one by one): " + "; ".join(parts))
    cpu = [(op, ours.cpu_per_gb(op)) for op in ("set", "get") if op in result.options.ops]
    shown = [f"{OP_LABELS[op]} {value:.3f}" for op, value in cpu if value is not None]
    if shown:
        lines.append("client CPU, seconds per GB (user+sys of this process, Rust I/O threads included; the server "
                     "not counted): " + ", ".join(shown))
    return lines


def compare_lines(result: RunResult) -> list[str]:
    if len(result.clients) < 2 and not result.unavailable:
        return []
    ours = result.clients[0]
    peers = result.clients[1:]
    lines = ["", f"side by side: same workload, same server, {_plural(result.options.rounds, 'round')}, order rotating per round "
                 "(medians; ratio = lmcache_resp / peer)"]
    for client in result.clients:
        lines.append(f"  {client.name}: {client.description}")
    for name, why in result.unavailable.items():
        lines.append(f"  {name}: not measured: {why}")
    for peer in peers:
        if peer.failure:
            lines.append(f"  {peer.name}: hung/failed: {peer.failure}")
    header = ["op", ours.name, *(p.name for p in peers), *(f"vs {p.name}" for p in peers)]
    rows = [header]
    for op in result.options.ops:
        mine = ours.median(op)
        row = [f"{OP_LABELS[op]} ({'GB/s' if op in ('set', 'get') else 'ops/s'})", _cell(op, mine)]
        theirs = [p.median(op) if op in p.ops else None for p in peers]
        row += [_cell(op, v) if op in p.ops else "n/a" for p, v in zip(peers, theirs)]
        row += [f"{mine / v:.2f}x" if mine and v else "n/a" for v in theirs]
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for i, row in enumerate(rows):
        lines.append("  " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if i == 0:
            lines.append("  " + "-+-".join("-" * w for w in widths))
    cpu = []
    for client in result.clients:
        parts = [f"{OP_LABELS[op]} {v:.3f}" for op in ("set", "get") if op in client.ops and (v := client.cpu_per_gb(op)) is not None]
        if parts:
            cpu.append(f"{client.name} {', '.join(parts)}")
    if cpu:
        lines.append("  client CPU, seconds per GB: " + "; ".join(cpu))
    return lines


def _cell(op: str, value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.3f}" if op in ("set", "get") else f"{value:,.0f}"


def ceiling_lines(result: RunResult) -> list[str]:
    if not result.ceiling:
        return []
    probes = result.ceiling
    block = format_size(result.options.chunk_bytes)
    lines = ["", f"ceiling (no Redis in the path; {block} blocks, {probes[0].bytes / GB:.1f} GB per probe):"]
    for p in probes:
        lines.append(f"  {p.label}: {p.gb_per_s:.2f} GB/s ({p.cpu_seconds / max(p.bytes / GB, 1e-9):.3f} CPU s/GB)")
    ref = reference(probes)
    ours = result.ours
    if ours is not None:
        shares = [f"Batch {OP_LABELS[op]} {100 * v / ref.gb_per_s:.0f}%" for op in ("set", "get")
                  if op in result.options.ops and (v := ours.median(op)) is not None]
        unix = next((p for p in probes if p.unix), None)
        lines.append(f"  share of the {ref.label} ceiling ({ref.gb_per_s:.2f} GB/s): " + ", ".join(shares)
                     + (f" (a Unix socket moves {unix.gb_per_s:.2f} GB/s)" if unix else ""))
    return lines


def _sweep_table(points: list[SweepPoint], first: str, label: str) -> list[str]:
    rows = [[first, "keys", "GB per batch", "SET GB/s", "GET GB/s"]]
    for p in points:
        rows.append([label.format(chunk=format_size(p.chunk_bytes), workers=p.num_workers),
                     f"{p.keys}{' (capped)' if p.capped else ''}", f"{p.keys * p.chunk_bytes / GB:.3f}",
                     f"{p.set_gbps:.3f}", f"{p.get_gbps:.3f}"])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for i, row in enumerate(rows):
        out.append("  " + " | ".join(cell.rjust(w) if i else cell.ljust(w) for cell, w in zip(row, widths)))
        if i == 0:
            out.append("  " + "-+-".join("-" * w for w in widths))
    return out


def sweep_lines(result: RunResult) -> list[str]:
    sweep = result.sweep
    if sweep is None:
        return []
    lines = []
    if sweep.by_chunk:
        lines += ["", f"throughput against chunk size, {sweep.by_chunk[0].num_workers} I/O workers (medians):"]
        lines += _sweep_table(sweep.by_chunk, "chunk", "{chunk}")
        k = sweep.chunk_knee
        if k is not None:
            best = max(sweep.by_chunk, key=lambda p: p.get_gbps)
            lines.append(f"  knee: {format_size(k.chunk_bytes)} is the smallest chunk reaching {KNEE_SHARE:.0%} of the best "
                         f"GET ({best.get_gbps:.3f} GB/s at {format_size(best.chunk_bytes)})")
    if sweep.by_workers:
        lines += ["", f"throughput against I/O workers, {format_size(sweep.by_workers[0].chunk_bytes)} chunks (medians):"]
        lines += _sweep_table(sweep.by_workers, "workers", "{workers}")
        k = sweep.workers_knee
        if k is not None:
            best = max(sweep.by_workers, key=lambda p: p.get_gbps)
            lines.append(f"  knee: {k.num_workers} workers is the fewest reaching {KNEE_SHARE:.0%} of the best GET "
                         f"({best.get_gbps:.3f} GB/s at {best.num_workers} workers)")
    if any(p.capped for p in sweep.by_chunk + sweep.by_workers):
        lines.append("  (capped): fewer keys than --num-keys, so that one batch moves at most ~2 GiB")
    return lines


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
