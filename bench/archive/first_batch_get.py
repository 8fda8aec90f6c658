"""The first GET batch of a fresh process, into pages it never touched: lmcache_resp with
the arena pre-faulted (the default) and without (prefault=False, what every arena without a
NUMA node got before), against LMCache's C++ connector into fresh and into touched buffers.

    .venv/bin/python bench/first_batch_get.py --lmcache-python <lmcache-peer>/bin/python

Every measurement runs in a new process against one throwaway redis-server that holds the
keys; the order rotates per round; medians are printed with ratios to LMCache.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap

from lmcache_resp import PagedRespStore
from lmcache_resp_servers import RedisServer

OURS = textwrap.dedent(
    """
    import json, sys, time
    from lmcache_resp import PagedRespStore
    port, keys, chunk, prefault = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    with PagedRespStore(f"resp://127.0.0.1:{port}", page_size=chunk, num_pages=keys, num_workers=8,
                        prefault=prefault) as store:
        pages = store.allocate_many(keys)
        names = [f"first:{i}" for i in range(keys)]
        started = time.perf_counter()
        hits = store.get(names, pages)
        took = time.perf_counter() - started
        assert all(hits) and bytes(pages[-1].byte_array[:8]) == (keys - 1).to_bytes(8, "little")
    print(json.dumps({"gb_per_s": keys * chunk / took / 1e9}))
    """
)

PEER = textwrap.dedent(
    """
    import json, os, select, sys, time
    import numpy as np
    import lmcache_peer
    port, keys, chunk, touched = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    pool = np.zeros((keys, chunk), dtype=np.uint8)
    if touched:
        pool[:] = 1
    views = [memoryview(row) for row in pool]
    client = lmcache_peer.client("127.0.0.1", port, 8)
    names = [f"first:{i}" for i in range(keys)]
    started = time.perf_counter()
    fid = client.submit_batch_get(names, views)
    done = None
    while done is None:
        select.select([client.event_fd()], [], [], 60)
        for completion in client.drain_completions():
            if completion[0] == fid:
                done = completion
    took = time.perf_counter() - started
    assert done[1] and all(done[3]) and bytes(views[-1][:8]) == (keys - 1).to_bytes(8, "little"), done[:3]
    print(json.dumps({"gb_per_s": keys * chunk / took / 1e9}))
    os._exit(0)
    """
)


def measure(python: str, code: str, port: int, keys: int, chunk: int, flag: bool) -> float:
    out = subprocess.run(
        [python, "-c", code, str(port), str(keys), str(chunk), "1" if flag else "0"],
        capture_output=True, text=True, check=True, timeout=300,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1])["gb_per_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lmcache-python", required=True)
    parser.add_argument("--keys", type=int, default=500)
    parser.add_argument("--chunk-mb", type=float, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    chunk = int(args.chunk_mb * (1 << 20))
    runs = {
        "lmcache_resp, prefault (default)": (sys.executable, OURS, True),
        "lmcache_resp, prefault=False": (sys.executable, OURS, False),
        "LMCache C++, fresh buffers": (args.lmcache_python, PEER, False),
        "LMCache C++, touched buffers": (args.lmcache_python, PEER, True),
    }
    samples: dict[str, list[float]] = {name: [] for name in runs}
    with RedisServer(io_threads=1, server="redis") as server:
        with PagedRespStore(f"resp://127.0.0.1:{server.port}", page_size=chunk, num_pages=args.keys) as store:
            pages = store.allocate_many(args.keys)
            for i, page in enumerate(pages):
                page.write_bytes(i.to_bytes(8, "little") * (chunk // 8))
            store.put([f"first:{i}" for i in range(args.keys)], pages)
        names = list(runs)
        for round_index in range(args.rounds):
            for name in names[round_index % len(names):] + names[: round_index % len(names)]:
                python, code, flag = runs[name]
                samples[name].append(measure(python, code, server.port, args.keys, chunk, flag))
    print(f"first GET batch of a fresh process: {args.keys} x {args.chunk_mb:g} MiB, {args.rounds} rounds, medians")
    peer = statistics.median(samples["LMCache C++, fresh buffers"])
    touched = statistics.median(samples["LMCache C++, touched buffers"])
    for name, values in samples.items():
        median = statistics.median(values)
        rounds = " ".join(f"{v:.2f}" for v in values)
        print(f"  {name:34s} {median:5.2f} GB/s  vs LMCache fresh {median / peer:4.2f}x  touched {median / touched:4.2f}x"
              f"   ({rounds})")


if __name__ == "__main__":
    main()
