"""Our client's GET throughput against value size and piece size, on one server."""
import statistics, sys, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
import numpy as np
from lmcache_resp import PagedRespStore
from lmcache_resp_servers.server import RedisServer  # the benchmark's throwaway server
MiB = 1 << 20

def run(kind, sizes, pieces, rounds=int(__import__("os").environ.get("ROUNDS", "3")), batch_bytes=1 << 30, workers=8, inflight=None):
    # STEADY=1: the server keeps the memory it frees (the steady regime), after a warm-up pass.
    steady = __import__("os").environ.get("STEADY") == "1"
    with RedisServer(server=kind, keep_freed_memory=steady) as s:
        for size_mb in sizes:
            size = int(size_mb * MiB)
            n = max(4, batch_bytes // size)
            for piece_mb in pieces:
                kw = dict(get_piece_bytes=int(piece_mb * MiB))
                if inflight: kw["max_inflight_bytes"] = inflight
                with PagedRespStore(f"resp://127.0.0.1:{s.port}", page_size=size, num_pages=n,
                                    num_workers=workers, timeout=120, **kw) as st:
                    pages = st.allocate_many(n)
                    for i, p in enumerate(pages):
                        p.numpy()[:64] = i % 251
                    keys = [f"v{size_mb}:{i}" for i in range(n)]
                    st.put(keys, pages)
                    if steady:
                        st.get(keys, pages)  # the warm-up: the server's reply buffers are made once
                    rates = []
                    for _ in range(rounds):
                        t = time.perf_counter()
                        assert st.get(keys, pages) == [True] * n
                        rates.append(n * size / (time.perf_counter() - t) / 1e9)
                    assert all(int(p.numpy()[0]) == i % 251 for i, p in enumerate(pages))
                    st.delete(keys)
                print(f"{kind} value {size_mb:g} MiB x{n} piece {piece_mb:g} MiB: GET {statistics.median(rates):.2f} GB/s "
                      f"({' '.join(f'{r:.2f}' for r in rates)})", flush=True)

kind = sys.argv[1]
sizes = [float(x) for x in sys.argv[2].split(",")]
pieces = [float(x) for x in sys.argv[3].split(",")]
inflight = int(sys.argv[4]) if len(sys.argv) > 4 else None
run(kind, sizes, pieces, inflight=inflight)
