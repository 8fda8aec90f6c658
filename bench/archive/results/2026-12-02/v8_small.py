"""Per-batch GET latency, 32 x 256 KiB, on one server, connections_per_worker 1 vs 4 (ABAB)."""
import statistics, sys, time
from lmcache_resp import PagedRespStore
from lmcache_resp_servers.server import RedisServer
kind = sys.argv[1]
with RedisServer(server=kind, keep_freed_memory=True) as s:
    for cpw in (1, 4, 1, 4, 1, 4):
        with PagedRespStore(f"redis://127.0.0.1:{s.port}", page_size=256 << 10, num_pages=32, num_workers=8,
                            connections_per_worker=cpw, timeout=10) as st:
            pages = st.allocate_many(32)
            for i, p in enumerate(pages):
                p.numpy()[:16] = i
            keys = [f"k{i}" for i in range(32)]
            st.put(keys, pages)
            for _ in range(50):
                st.get(keys, pages)
            get_ms, set_ms = [], []
            for _ in range(300):
                t = time.perf_counter(); assert st.get(keys, pages) == [True] * 32; get_ms.append((time.perf_counter() - t) * 1e3)
            for _ in range(300):
                t = time.perf_counter(); st.put(keys, pages); set_ms.append((time.perf_counter() - t) * 1e3)
            assert all(int(p.numpy()[0]) == i for i, p in enumerate(pages))
            print(f"{kind} cpw={cpw}: GET p50 {statistics.median(get_ms):.2f} ms, SET p50 {statistics.median(set_ms):.2f} ms", flush=True)
