"""Why 8 MiB values SET faster than two 4 MiB ones: PagedRespStore alone, max_inflight_bytes default vs 16 MiB."""
import statistics, tempfile, time, uuid
from pathlib import Path
from lmcache_resp import PagedRespStore
from lmcache_resp.bench.target import recommended_io_threads
from lmcache_resp_servers import RedisServer
srv = RedisServer(io_threads=recommended_io_threads(), server="redis", keep_freed_memory=True)
try:
    total = 256 << 20
    res = {}
    stores = {}
    for size in (4 << 20, 8 << 20):
        for inflight in (None, 16 << 20):
            kw = {} if inflight is None else {"max_inflight_bytes": inflight}
            stores[(size, inflight)] = PagedRespStore(host=srv.host, port=srv.port, page_size=size, num_pages=total // size, num_workers=8, **kw)
    order = list(stores)
    for r in range(7):
        for key in (order if r % 2 == 0 else order[::-1]):
            st = stores[key]; n = total // key[0]
            pages = st.allocate_many(n)
            keys = [f"{uuid.uuid4().hex}{i}" for i in range(n)]
            t = time.perf_counter(); st.put(keys, pages); dt = time.perf_counter() - t
            st.delete(keys); [st.free(p) for p in pages]
            if r: res.setdefault(key, []).append(dt)
    for key, v in res.items():
        print(f"value {key[0] >> 20} MiB, max_inflight_bytes {key[1] or 'default (512 KiB)'}: set {total / statistics.median(v) / 1e9:.2f} GB/s")
finally:
    srv.stop()
