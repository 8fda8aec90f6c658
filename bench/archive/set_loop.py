"""SET batches of N x MB MiB (env N, MB, SECS) in a loop against a throwaway redis-server, for a
profiler to attach to: prints its pid when ready, then the throughput and the client CPU per GB."""
import os, sys, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from lmcache_resp import PagedRespStore
from lmcache_resp_servers.server import RedisServer  # the benchmark's throwaway server
MiB = 1 << 20
n = int(os.environ.get("N", "128")); size = int(float(os.environ.get("MB", "4")) * MiB)
with RedisServer() as s:
    with PagedRespStore(f"resp://127.0.0.1:{s.port}", page_size=size, num_pages=n, num_workers=8) as st:
        pages = st.allocate_many(n)
        for p in pages: p.numpy()[:] = 7
        keys = [f"k{i}" for i in range(n)]
        st.put(keys, pages)
        print("ready", os.getpid(), flush=True)
        t_end = time.time() + float(os.environ.get("SECS", "12"))
        total = 0; c0 = time.process_time(); t0 = time.time()
        while time.time() < t_end:
            st.put(keys, pages); total += n * size
        dt = time.time() - t0; cpu = time.process_time() - c0
        print(f"SET {total/dt/1e9:.2f} GB/s, client CPU {cpu/(total/1e9):.3f} s/GB", flush=True)
