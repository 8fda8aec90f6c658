"""Medians per (run file, client, op, shape) of batch.py lines: p50, p99, client CPU per batch and
per GB, server CPU per batch, voluntary switches per batch. usage: medians.py FILE..."""
import re, statistics, sys
rows = {}
pat = re.compile(r"^(\S+)\s+(\S+) (\S+) if(\d+): p50 ([\d.]+) ms .* p99 ([\d.]+)\s+cpu/batch ([\d.]+) ms\s+cpu/GB ([\d.]+) s\s+server cpu/batch ([\d.]+) ms\s+switches/batch ([\d.]+)\+")
for path in sys.argv[1:]:
    for line in open(path):
        m = pat.match(line)
        if m:
            who, op, shape, inflight, *vals = m.groups()
            rows.setdefault((path, op, shape, inflight, who), []).append([float(v) for v in vals])
print(f"{'file':24s} {'op':6s} {'shape':12s} if {'client':9s} n  {'p50 ms':>8s} {'p99 ms':>8s} {'cpu/batch':>9s} {'cpu/GB s':>8s} {'srv ms':>7s} {'sw/batch':>8s}")
for (path, op, shape, inflight, who), runs in rows.items():
    med = [statistics.median(col) for col in zip(*runs)]
    print(f"{path[:24]:24s} {op:6s} {shape:12s} {inflight:2s} {who:9s} {len(runs)}  {med[0]:8.3f} {med[1]:8.3f} {med[2]:9.3f} {med[3]:8.3f} {med[4]:7.3f} {med[5]:8.1f}")
