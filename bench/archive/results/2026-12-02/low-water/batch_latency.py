"""Per-batch latency of a native connector: submit one batch of N keys, wait on its eventfd,
drain; repeated. Ours (lmcache_resp.RespConnector) vs LMCache's C++ LMCacheRedisClient."""
import select, sys, time, os, statistics
import numpy as np

which, port, op, n, size, reps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
if which == "ours":
    from lmcache_resp import RespConnector
    import json
    extra = json.loads(os.environ.get("OURS_KW", "{}"))
    extra.setdefault("num_workers", int(os.environ.get("W", "8"))); extra.setdefault("connections_per_worker", int(os.environ.get("CPW", "1")))
    c = RespConnector(host="127.0.0.1", port=port, **extra)
else:
    from lmcache.lmcache_redis import LMCacheRedisClient
    c = LMCacheRedisClient("127.0.0.1", port, int(os.environ.get("W", "8")), "", "")
fd = c.event_fd()
pool = np.ones((n, size), dtype=np.uint8)
views = [memoryview(r) for r in pool]
keys = [f"{which}-lat-{i}" for i in range(n)]

def wait(fid):
    while True:
        select.select([fd], [], [], 10)
        for comp in c.drain_completions():
            if comp[0] == fid:
                assert comp[1], comp
                return comp

def run(kind):
    if kind == "set":
        return wait(c.submit_batch_set(keys, views))
    if kind == "get":
        return wait(c.submit_batch_get(keys, views))
    return wait(c.submit_batch_exists(keys))

def server_cpu():
    import socket
    with socket.create_connection(("127.0.0.1", port)) as so:
        so.sendall(b"INFO server\r\n")
        data = b""
        while b"process_id:" not in data or not data.endswith(b"\r\n\r\n"):
            chunk = so.recv(65536)
            if not chunk:
                break
            data += chunk
            if data.count(b"\r\n") > 10 and b"process_id:" in data and len(data) > 400:
                break
    pid = int(data.split(b"process_id:")[1].split(b"\r\n")[0])
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

run("set")
lat = []
scpu0 = server_cpu()
cpu0 = time.process_time()
for _ in range(reps):
    t = time.perf_counter()
    run(op)
    lat.append(time.perf_counter() - t)
cpu = time.process_time() - cpu0
scpu = server_cpu() - scpu0
lat.sort()
print(f"{which:6s} {op} {n}x{size}: p50 {statistics.median(lat)*1e3:.3f} ms  p10 {lat[len(lat)//10]*1e3:.3f}  p90 {lat[len(lat)*9//10]*1e3:.3f}  cpu/batch {cpu/reps*1e3:.3f} ms  server cpu/batch {scpu/reps*1e3:.3f} ms")
c.close()
