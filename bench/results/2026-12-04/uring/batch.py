"""Per-batch latency and cost of a native connector: submit one batch of N keys, wait on its
eventfd, drain; repeated. Ours (lmcache_resp.RespConnector; OURS_KW, e.g. {"io_backend": "uring"})
vs LMCache's C++ LMCacheRedisClient. INFLIGHT=k keeps k batches in flight (the batch's latency is
then from its submit to its completion). Copied from bench/results/2026-12-02/matrix/
batch_latency2.py, with p99, in-flight batches and the worker/process switch counts."""
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

def submit(kind, keys=keys):
    if kind == "set":
        return c.submit_batch_set(keys, views)
    if kind == "get":
        return c.submit_batch_get(keys, views)
    return c.submit_batch_exists(keys)

def run(kind):
    return wait(submit(kind))

INFLIGHT = int(os.environ.get("INFLIGHT", "1"))
pending = {}

def run_inflight(kind, reps):
    """k batches in flight (each over its own keys for SET, the same keys for reads)."""
    lat = []
    started = 0
    def start():
        nonlocal started
        ks = [f"{which}-lat-{started % INFLIGHT}-{i}" for i in range(n)] if kind == "set" else keys
        pending[submit(kind, ks)] = time.perf_counter()
        started += 1
    while started < INFLIGHT:
        start()
    done = 0
    while done < reps:
        select.select([fd], [], [], 10)
        for comp in c.drain_completions():
            t0 = pending.pop(comp[0], None)
            if t0 is None:
                continue
            assert comp[1], comp
            lat.append(time.perf_counter() - t0)
            done += 1
            if started < reps:
                start()
    while pending:
        select.select([fd], [], [], 10)
        for comp in c.drain_completions():
            pending.pop(comp[0], None)
    return lat

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

def switches():
    total = [0, 0]
    for tid in os.listdir("/proc/self/task"):
        try:
            for line in open(f"/proc/self/task/{tid}/status"):
                if line.startswith("voluntary_ctxt_switches"):
                    total[0] += int(line.split()[1])
                elif line.startswith("nonvoluntary_ctxt_switches"):
                    total[1] += int(line.split()[1])
        except FileNotFoundError:
            pass
    return total

def syscalls_note():
    return ""

run("set")
sw0 = switches()
lat = []
scpu0 = server_cpu()
cpu0 = time.process_time()
wall0 = time.perf_counter()
if INFLIGHT == 1:
    for _ in range(reps):
        t = time.perf_counter()
        run(op)
        lat.append(time.perf_counter() - t)
else:
    lat = run_inflight(op, reps)
wall = time.perf_counter() - wall0
cpu = time.process_time() - cpu0
scpu = server_cpu() - scpu0
sw1 = switches()
lat.sort()
label = os.environ.get("LABEL", which)
gb = n * size * reps / 1e9
print(f"{label:6s} {op} {n}x{size} if{INFLIGHT}: p50 {statistics.median(lat)*1e3:.3f} ms  p10 {lat[len(lat)//10]*1e3:.3f}  p90 {lat[len(lat)*9//10]*1e3:.3f}  p99 {lat[min(len(lat)-1, len(lat)*99//100)]*1e3:.3f}  cpu/batch {cpu/reps*1e3:.3f} ms  cpu/GB {cpu/gb:.3f} s  server cpu/batch {scpu/reps*1e3:.3f} ms  switches/batch {(sw1[0]-sw0[0])/reps:.1f}+{(sw1[1]-sw0[1])/reps:.1f}  batches/s {reps/wall:.0f}", flush=True)
c.close()
