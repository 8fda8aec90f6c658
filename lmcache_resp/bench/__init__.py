"""``python -m lmcache_resp.bench``: batch SET/GET/EXISTS throughput of PagedRespStore against
Redis, verified byte for byte; peers side by side, sweeps, plots and the loopback ceiling.

``main(argv) -> int`` runs it in-process (the exit status is returned, not raised).
"""

from lmcache_resp.bench.cli import main

__all__ = ["main"]
