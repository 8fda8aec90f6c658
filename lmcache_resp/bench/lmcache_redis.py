"""LMCache's own redis-py-based connector (RedisConnector: what a ``redis://`` or ``rediss://``
remote_url gives an LMCache user today) as a peer: ``--compare lmcache-redis``.

It runs in an interpreter that has LMCache and torch (``--lmcache-redis-python``, else this one
when it can import LMCache), through lmcache_redis_driver.py as a persistent subprocess
speaking JSON lines, every wait bounded. The connector reaches the run's server with the run's
TLS settings, as a URL (redis-py's query parameters). Its keys are named by LMCache
(``<model>@1@0@<hash>@bfloat16kv_bytes`` and ``...metadata``) with the run's prefix as the model
name, registered for deletion before anything is written.
"""

from __future__ import annotations

import importlib.util
import sys
import urllib.parse
from pathlib import Path

from lmcache_resp.bench.errors import BenchError
from lmcache_resp.bench.lmcache_native import DriverRounds, SubprocessChannel, peer_python
from lmcache_resp.bench.target import KeyLedger, Target, redis_py_tls_kwargs
from lmcache_resp.bench.workload import Workload

__all__ = ["LMCacheRedisPeer", "connector_url"]

DRIVER = Path(__file__).resolve().with_name("lmcache_redis_driver.py")
CONNECTOR_MODULE = "lmcache.v1.storage_backend.connector.redis_connector"
SETUP_HINT = ("pass --lmcache-redis-python PATH, a Python with LMCache installed (scripts/test-lmcache.sh builds one: "
              "target/lmcache-0.5.6/venv/bin/python)")


def connector_url(target: Target) -> str:
    """The run's server as the URL an LMCache user would give: ``rediss://`` with redis-py's
    TLS query parameters when the run is on TLS; the password in the URL (it travels to the
    driver on its stdin, never on a command line)."""
    s = target.settings
    if s.unix_path is not None or s.host is None:
        raise BenchError("--compare lmcache-redis: give a TCP server (LMCache's RedisConnector is reached at host:port here)")
    user = urllib.parse.quote(s.username or "", safe="")
    password = urllib.parse.quote(s.password.reveal(), safe="") if s.password is not None else ""
    auth = f"{user}:{password}@" if password else ""
    host = f"[{s.host}]" if ":" in s.host else s.host
    query = {name: str(value).lower() if isinstance(value, bool) else str(value)
             for name, value in redis_py_tls_kwargs(s).items()}
    scheme = "rediss" if s.ssl else "redis"
    suffix = f"?{urllib.parse.urlencode(query)}" if query else ""
    return f"{scheme}://{auth}{host}:{s.port}/{s.db}{suffix}"


def _in_process_available() -> bool:
    try:
        return importlib.util.find_spec(CONNECTOR_MODULE) is not None
    except (ImportError, ValueError):
        return False


class LMCacheRedisPeer(DriverRounds):
    name = "lmcache-redis"
    supported_ops = ("set", "get", "exists")

    def __init__(self, target: Target, workload: Workload, ledger: KeyLedger, *, python: str | None) -> None:
        python = peer_python(python, _in_process_available, f"--compare lmcache-redis: LMCache ({CONNECTOR_MODULE}) is "
                             f"not importable by {sys.executable}; {SETUP_HINT}")
        self.workload = workload
        self.timeout = target.settings.timeout
        self.tls = bool(target.settings.ssl)
        self.channel = SubprocessChannel.driver(python, DRIVER)
        self.where = f"driven through {python}"
        init = {
            "op": "init", "url": connector_url(target), "num_keys": len(workload.keys),
            "model": ledger.prefix + "lmcache-redis", "chunk_bytes": workload.chunk_bytes, "seed": workload.seed,
            "timeout": self.timeout,
        }
        reply = self._start(init, "lmcache-redis", SETUP_HINT)
        ledger.register(list(reply.get("redis_keys") or []))
        self.client_name = str(reply.get("client"))
        self.version = str(reply.get("lmcache"))

    def describe(self) -> str:
        return (f"LMCache {self.version} {self.client_name} (redis-py asyncio{', TLS' if self.tls else ''}), "
                f"LMCache's batched_put and one get/exists per key gathered on its loop, {self.where}")
