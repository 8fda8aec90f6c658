"""summarize.py [DIR]: medians of the runs MODE-SEQ-WHICH.txt in DIR (default: beside this file,
where the raw outputs are kept), as in summary.txt."""
import os, re, glob, statistics as st, sys
rows = {}
folder = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
for path in sorted(glob.glob(os.path.join(folder, '*-*-*.txt'))):
    mode, seq, which = re.match(r'.*/(\w+)-(\d+)-(\w+)\.txt', path).groups()
    text = open(path).read()
    if '# exit status: 0' not in text:
        print('FAILED', path); continue
    peer = 'lmcache' if mode == 'plain' else 'redis-py'
    for m in re.finditer(r'^\s+(SET|GET|EXISTS) \((GB/s|ops/s)\)\s*\|\s*([\d.,]+)\s*\|\s*([\d.,]+)\s*\|\s*([\d.]+)x', text, re.M):
        op, unit, ours, theirs, ratio = m.groups()
        rows.setdefault((mode, op, unit), {}).setdefault(which, []).append(
            (int(seq), float(ours.replace(',', '')), float(theirs.replace(',', '')), float(ratio)))
for (mode, op, unit), d in rows.items():
    b = sorted(d.get('before', [])); a = sorted(d.get('after', []))
    if not a or not b: continue
    mb, ma = st.median(x[1] for x in b), st.median(x[1] for x in a)
    pb, pa = st.median(x[3] for x in b), st.median(x[3] for x in a)
    spread = lambda xs: (max(xs) - min(xs)) / st.median(xs)
    print(f"{mode:5} {op:6} {unit:5} n={len(b)}/{len(a)} before {mb:,.3f} after {ma:,.3f} after/before {ma/mb:.3f} "
          f"| vs-peer before {pb:.2f}x after {pa:.2f}x ({pa/pb:.3f}) | spread before {spread([x[1] for x in b]):.0%} after {spread([x[1] for x in a]):.0%}")
    print('   before', [x[1] for x in b], ' after', [x[1] for x in a])
