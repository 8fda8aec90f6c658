"""Builds the peers asked for with --compare, each on its own keys under the run's prefix."""

from __future__ import annotations

from lmcache_resp.bench.driver import Driver
from lmcache_resp.bench.keyspace import KeyLedger
from lmcache_resp.bench.options import Options
from lmcache_resp.bench.ours import OursDriver
from lmcache_resp.bench.target import Target
from lmcache_resp.bench.workload import Workload

__all__ = ["make_peer"]


def make_peer(name: str, options: Options, target: Target, ours: OursDriver, ledger: KeyLedger) -> Driver:
    """The peer ``name``; BenchError when it cannot run here (not installed, cannot connect)."""
    w = ours.workload

    def workload() -> Workload:
        return Workload(ledger.keys(name, len(w.keys)), w.chunk_bytes, w.seed)

    if name == "redis-py":
        from lmcache_resp.bench.peers.redis_py import RedisPyPeer

        # Same pages as lmcache_resp (same bytes, no second pool), its own keys.
        return RedisPyPeer(target, workload(), ours.buffers, num_workers=options.num_workers)
    if name == "lmcache":
        from lmcache_resp.bench.peers.lmcache_native import LMCachePeer

        return LMCachePeer(target, workload(), num_workers=options.num_workers, python=options.lmcache_python)
    if name == "redis-benchmark":
        from lmcache_resp.bench.peers.redis_benchmark import RedisBenchmarkPeer

        return RedisBenchmarkPeer(target, w, ledger.key("redis-benchmark"), num_workers=options.num_workers)
    raise ValueError(f"unknown peer {name!r}")
