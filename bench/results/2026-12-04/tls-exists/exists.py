"""EXISTS over TLS: keys/s and client CPU per key, one build (run from its source dir).

    exists.py PORT WORKERS ROUNDS PER_ROUND CA   (CA: the test CA's certificate, DIR/certs/ca.crt)"""
import sys, time, statistics
import lmcache_resp
from lmcache_resp import PagedRespStore
print(lmcache_resp.__file__, end=" ")
port, workers, rounds, per_round = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
store = PagedRespStore(f"rediss://127.0.0.1:{port}", page_size=4096, num_pages=64,
                       ssl_ca_certs=sys.argv[5], num_workers=workers)
keys = [f"exists-bench:{i:08d}".encode() for i in range(20000)]
for _ in range(5):
    store.exists(keys)
rates, cpus = [], []
for r in range(rounds):
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(per_round):
        store.exists(keys)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    n = per_round * len(keys)
    rates.append(n / wall); cpus.append(cpu / n * 1e9)
print(f"keys/s {statistics.median(rates):,.0f} cpu ns/key {statistics.median(cpus):.0f} rounds {[round(x/1e3) for x in rates]} cpu {[round(x) for x in cpus]}")
store.close()
