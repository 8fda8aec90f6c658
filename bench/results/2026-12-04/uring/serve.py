"""Start a throwaway server (kind, steady|fresh), print its port, sleep until killed."""
import sys, time
from lmcache_resp_servers.server import RedisServer
kind, regime = sys.argv[1], sys.argv[2]
with RedisServer(server=kind, keep_freed_memory=(regime == "steady")) as s:
    print(s.port, flush=True)
    time.sleep(100000)
