"""Values written by RedisClient read back byte-exact by redis-py, and the other way round."""

from __future__ import annotations

import numpy as np
from conftest import RedisServer, pattern

from lmcache_resp import RedisClient
from lmcache_resp_testing.servers import redis_py


def test_redis_py_reads_what_we_write_and_we_read_what_it_writes(redis_server: RedisServer) -> None:
    other = redis_py(redis_server)
    with RedisClient("127.0.0.1", redis_server.port) as client:
        for i, size in enumerate([1, 1000, 256 * 1024, 4 << 20]):
            ours = pattern(size, i)
            client.set(f"ours-{i}", ours)
            assert other.get(f"ours-{i}") == ours

            theirs = pattern(size, 100 + i)
            other.set(f"theirs-{i}", theirs)
            dest = np.empty(size, dtype=np.uint8)
            assert client.get(f"theirs-{i}", dest) == size
            assert dest.tobytes() == theirs
