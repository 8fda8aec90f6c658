"""Server-side GET vs GETRANGE pieces with redis-benchmark (8 clients), same stored value."""
import re, subprocess, sys, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from lmcache_resp_servers.server import RedisServer  # the benchmark's throwaway server
import redis

MiB = 1 << 20
def bench(port, args, n):
    out = subprocess.run(["redis-benchmark", "-p", str(port), "-c", "8", "-n", str(n), "-q", *args],
                         capture_output=True, text=True).stdout
    m = re.findall(r"([\d.]+) requests per second", out)
    return float(m[-1]) if m else float("nan")

def main(kind):
    with RedisServer(server=kind) as s:
        r = redis.Redis(port=s.port)
        for size_mb in [int(x) for x in sys.argv[2].split(",")]:
            size = size_mb * MiB
            r.set("v", b"x" * size)
            n = max(16, int(2e9 / size))
            rps = bench(s.port, ["GET", "v"], n)
            print(f"{kind} {size_mb} MiB GET whole: {rps:.1f} req/s = {rps*size/1e9:.2f} GB/s", flush=True)
            for piece_mb in [1, 2, 4, 8]:
                if piece_mb >= size_mb: continue
                piece = piece_mb * MiB
                rps = bench(s.port, ["GETRANGE", "v", "0", str(piece - 1)], int(2e9 / piece))
                print(f"{kind} {size_mb} MiB GETRANGE {piece_mb} MiB pieces: {rps:.1f} req/s = {rps*piece/1e9:.2f} GB/s", flush=True)
main(sys.argv[1])
