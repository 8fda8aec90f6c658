"""memtier_benchmark alone, driven as --compare memtier drives it (MemtierPeer: a throwaway
steady redis-server, 520 keys x 4 MiB, new keys every round, every value read back), 4 rounds;
with the argument `pool`, an lmcache_resp page pool of the same size is held (touched, idle)
meanwhile, as it is in a side-by-side run. Prints each round's GB/s and memtier's CPU s/GB.

    python bench/results/2026-12-04/memtier/memtier_alone.py MEMTIER_BINARY [pool]
"""

import sys

from lmcache_resp import PagedRespStore, RespSettings
from lmcache_resp.bench.memtier_peer import MemtierPeer
from lmcache_resp.bench.target import KeyLedger, Target, recommended_io_threads
from lmcache_resp_servers import RedisServer

KEYS, CHUNK = 520, 4 << 20
binary, with_pool = sys.argv[1], sys.argv[2:] == ["pool"]
server = RedisServer(io_threads=recommended_io_threads(), server="redis", keep_freed_memory=True)
try:
    target = Target(RespSettings.resolve(host=server.host, port=server.port, username="", password="", timeout=60),
                    embedded=True)
    if with_pool:
        store = PagedRespStore(page_size=CHUNK, num_pages=KEYS, num_workers=8, **target.connect_kwargs())
        for page in store.allocate_many(KEYS):
            page.numpy()[:] = 1
    peer = MemtierPeer(target, KeyLedger(), binary=binary, num_keys=KEYS, chunk_bytes=CHUNK)
    for r in range(4):
        samples = peer.run_round(r, ("set", "get"))
        print(f"{'pool held' if with_pool else 'alone'}, round {r + 1}: " + ", ".join(
            f"{op.upper()} {s.rate:.3f} GB/s ({(s.cpu_seconds or 0) / (s.payload_bytes / 1e9):.2f} CPU s/GB)"
            for op, s in samples.items()), flush=True)
    peer.close()
finally:
    server.stop()
