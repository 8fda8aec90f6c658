"""Start a throwaway 3-primary cluster (steady), print its endpoints, sleep until killed."""
import sys, time
from lmcache_resp_servers.cluster import RedisCluster
c = RedisCluster(primaries=3, keep_freed_memory=True)
print(",".join(c.endpoints), flush=True)
try:
    time.sleep(100000)
finally:
    c.stop()
