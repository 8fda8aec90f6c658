"""32 x 4 MiB SET batches through ours on the running cluster: wall p50, client CPU and the servers' CPU per batch."""
import os, select, statistics, sys, time, socket
import numpy as np
from lmcache_resp import RespConnector
eps = open(os.path.join(os.environ["SCRATCH"], "cluster.eps")).read().split()[0]  # SCRATCH: bench/archive/README.md
n, size, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
c = RespConnector(url="redis://" + eps, cluster=True, num_workers=8)
fd = c.event_fd()
pool = np.ones((n, size), dtype=np.uint8); views = [memoryview(r) for r in pool]
keys = [f"cl-{i}" for i in range(n)]
def wait(fid):
    while True:
        select.select([fd], [], [], 10)
        for comp in c.drain_completions():
            if comp[0] == fid:
                assert comp[1], comp; return
def pid_of(ep):
    host, port = ep.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as so:
        so.sendall(b"INFO server\r\n"); data = b""
        while b"process_id:" not in data or data.count(b"\r\n", data.index(b"process_id:")) < 1:
            data += so.recv(65536)
    return int(data.split(b"process_id:")[1].split(b"\r\n")[0])
pids = [pid_of(ep) for ep in eps.split(",")]
def scpu():
    t = 0
    for p in pids:
        f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split(); t += int(f[11]) + int(f[12])
    return t / os.sysconf("SC_CLK_TCK")
wait(c.submit_batch_set(keys, views))
lat = []; s0 = scpu(); c0 = time.process_time()
for _ in range(reps):
    t = time.perf_counter(); wait(c.submit_batch_set(keys, views)); lat.append(time.perf_counter() - t)
cpu = time.process_time() - c0; sc = scpu() - s0
print(f"ours cluster set {n}x{size}: p50 {statistics.median(lat)*1e3:.2f} ms  client cpu/batch {cpu/reps*1e3:.2f} ms  3 servers cpu/batch {sc/reps*1e3:.2f} ms  (2 vCPUs: {2*statistics.median(lat)*1e3:.2f} ms of CPU per p50 batch)")
c.close()
