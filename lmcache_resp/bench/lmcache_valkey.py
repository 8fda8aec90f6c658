"""LMCache's glide-based Valkey client (``ValkeyWorkerPool``, what its ``valkey`` L2 adapter runs
on: the adapter LMCache users have for a cluster) as a peer: ``--compare lmcache-valkey``.

It runs in an interpreter that has LMCache and valkey-glide-sync (``--lmcache-python``, else this
one when it can import them), through lmcache_valkey_driver.py as a persistent subprocess
speaking JSON lines, every wait bounded. Standalone it reaches one server; with ``--cluster N``
it reaches the same cluster as ours (glide's cluster client), unlike the single-server peers.
Its keys are the run's (under its prefix), deleted afterwards.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from lmcache_resp.bench.errors import BenchError
from lmcache_resp.bench.lmcache_native import DriverRounds, SubprocessChannel, peer_python
from lmcache_resp.bench.options import ALL_OPS
from lmcache_resp.bench.target import Target
from lmcache_resp.bench.workload import Workload

__all__ = ["LMCacheValkeyPeer", "POOL_MODULES"]

DRIVER = Path(__file__).resolve().with_name("lmcache_valkey_driver.py")
# Where LMCache keeps ValkeyWorkerPool: 0.5.7 moved it beside the adapter (the same class).
POOL_MODULES = ("lmcache.v1.distributed.l2_adapters.valkey", "lmcache.v1.storage_backend.valkey")
SETUP_HINT = ("pass --lmcache-python PATH, a Python with LMCache and valkey-glide-sync installed "
              "(pip install lmcache valkey-glide-sync)")


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _in_process_available() -> bool:
    return any(map(_importable, POOL_MODULES)) and _importable("glide_sync")


def _host_port(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


class LMCacheValkeyPeer(DriverRounds):
    name = "lmcache-valkey"
    supported_ops = ALL_OPS

    def __init__(self, target: Target, workload: Workload, *, num_workers: int, python: str | None) -> None:
        s = target.settings
        if s.unix_path is not None or s.host is None:
            raise BenchError("--compare lmcache-valkey: valkey-glide reaches servers over TCP only; give --host/--port")
        if s.ssl:
            raise BenchError("--compare lmcache-valkey: LMCache's valkey adapter turns TLS on but cannot be given a CA "
                             "to trust, so it cannot verify the run's test certificates")
        python = peer_python(python, _in_process_available, f"--compare lmcache-valkey: LMCache's {' or '.join(POOL_MODULES)} or "
                             f"glide_sync is not importable by {sys.executable}; {SETUP_HINT}")
        self.workload = workload
        self.timeout = s.timeout
        self.num_workers = num_workers
        self.cluster = bool(s.cluster)
        self.channel = SubprocessChannel.driver(python, DRIVER)
        self.where = f"driven through {python}"
        init = {
            "op": "init", "nodes": [_host_port(endpoint) for endpoint in s.endpoints], "cluster": self.cluster,
            "num_workers": num_workers, "username": s.username or "",
            "password": s.password.reveal() if s.password is not None else "", "db": s.db,
            "keys": workload.keys, "chunk_bytes": workload.chunk_bytes, "seed": workload.seed, "timeout": s.timeout,
        }
        reply = self._start(init, "lmcache-valkey", SETUP_HINT)
        self.client_name = str(reply.get("client"))
        self.versions = f"LMCache {reply.get('lmcache')}, valkey-glide-sync {reply.get('glide')}"
        self.buffer_get = bool(reply.get("buffer_get"))

    def describe(self) -> str:
        return (f"{self.versions}: {self.client_name}, {self.num_workers} worker threads with a glide "
                f"{'cluster ' if self.cluster else ''}client each, one future per key as LMCache's valkey L2 "
                f"adapter submits them ({'buffer GET into a scratch buffer, then copied' if self.buffer_get else 'GET as bytes, then copied'}; "
                f"request timeout {self.timeout:g} s), {self.where}")
