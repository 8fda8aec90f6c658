"""Peers measured side by side with lmcache_resp (``--compare``): redis-py, LMCache's C++
connector (driven in another interpreter when needed) and redis-benchmark."""
