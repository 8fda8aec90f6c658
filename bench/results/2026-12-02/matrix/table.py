"""One markdown table of matrix.sh's outputs: ours/peer per cell (median [min-max])."""
import pathlib
import re
import sys

here = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
names = {"redis": "Redis 7.0.15", "valkey": "Valkey 8.1.8", "valkey9": "Valkey 9.1.2", "cluster3": "3-primary cluster"}
cell_re = re.compile(r"^(\S+ \S+) x (\d+), (\d) in flight")
row_re = re.compile(r"^\s+(store|load|lookup)\s+\|.*\|\s*([\d.]+x \[[\d.]+-[\d.]+\])\s*$")
print("| server | regime | in flight | cell | store | load | lookup |")
print("|---|---|---|---|---|---|---|")
for path in sorted(here.glob("*.txt"), key=lambda p: (list(names).index(p.stem.split("-")[0]), p.stem.split("-")[1] != "steady", p.stem)):
    server, regime, depth = path.stem.split("-")
    cell, ratios = None, {}
    for line in path.read_text().splitlines():
        if m := cell_re.match(line):
            cell, ratios = f"{m.group(1).replace('KiB', 'KB')} x {m.group(2)}", {}
        elif cell and (m := row_re.match(line)):
            ratios[m.group(1)] = m.group(2)
            if m.group(1) == "lookup":
                print(f"| {names[server]} | {regime} | {depth[2:]} | {cell} | {ratios.get('store', '')} | "
                      f"{ratios.get('load', '')} | {ratios['lookup']} |")
