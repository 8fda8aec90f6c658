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
import os
import sys
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lmcache_resp.bench.errors import BenchError, PeerFailed
from lmcache_resp.bench.lmcache_native import INIT_GRACE_SECONDS, SubprocessChannel
from lmcache_resp.bench.measure import OpSample
from lmcache_resp.bench.options import PASSWORD_ENV
from lmcache_resp.bench.target import KeyLedger, Target
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
    query: dict[str, str] = {}
    if s.ssl:
        given = {"ssl_ca_certs": s.ssl_ca_certs, "ssl_ca_path": s.ssl_ca_path, "ssl_certfile": s.ssl_certfile,
                 "ssl_keyfile": s.ssl_keyfile}
        query.update({k: v for k, v in given.items() if v is not None})
        query["ssl_cert_reqs"] = s.ssl_cert_reqs or "required"
        query["ssl_check_hostname"] = "true" if s.ssl_check_hostname else "false"
    scheme = "rediss" if s.ssl else "redis"
    suffix = f"?{urllib.parse.urlencode(query)}" if query else ""
    return f"{scheme}://{auth}{host}:{s.port}/{s.db}{suffix}"


def _in_process_available() -> bool:
    try:
        return importlib.util.find_spec(CONNECTOR_MODULE) is not None
    except (ImportError, ValueError):
        return False


class LMCacheRedisPeer:
    name = "lmcache-redis"
    supported_ops = ("set", "get", "exists")

    def __init__(self, target: Target, workload: Workload, ledger: KeyLedger, *, python: str | None) -> None:
        if python is None:
            if not _in_process_available():
                raise BenchError(f"--compare lmcache-redis: LMCache ({CONNECTOR_MODULE}) is not importable by "
                                 f"{sys.executable}; {SETUP_HINT}")
            python = sys.executable
        self.workload = workload
        self.timeout = target.settings.timeout
        self.tls = bool(target.settings.ssl)
        env = {k: v for k, v in os.environ.items() if k != PASSWORD_ENV}
        self.channel = SubprocessChannel([python, str(DRIVER)], env=env)
        self.where = f"driven through {python}"
        init = {
            "op": "init", "url": connector_url(target), "num_keys": len(workload.keys),
            "model": ledger.prefix + "lmcache-redis", "chunk_bytes": workload.chunk_bytes, "seed": workload.seed,
            "timeout": self.timeout,
        }
        try:
            reply = self.channel.request(init, self.timeout + INIT_GRACE_SECONDS)
        except PeerFailed as exc:
            self.channel.close()
            raise BenchError(f"--compare lmcache-redis: the driver did not start: {exc}") from None
        if not reply.get("ok"):
            self.channel.close({"op": "close"})
            raise BenchError(f"--compare lmcache-redis: {reply.get('error')}; {SETUP_HINT}")
        ledger.register(list(reply.get("redis_keys") or []))
        self.client_name = str(reply.get("client"))
        self.version = str(reply.get("lmcache"))

    def describe(self) -> str:
        return (f"LMCache {self.version} {self.client_name} (redis-py asyncio{', TLS' if self.tls else ''}), "
                f"LMCache's batched_put and one get/exists per key gathered on its loop, {self.where}")

    def _call(self, op: str, round_index: int, keys: int, payload_bytes: int, repeat: int = 1) -> tuple[OpSample, dict[str, Any]]:
        reply = self.channel.request(
            {"op": op, "round": round_index, "repeat": repeat}, repeat * self.timeout + 60 + self.workload.batch_bytes / 2e8
        )
        if not reply.get("ok"):
            raise PeerFailed(f"{op.upper()}: {reply.get('error') or 'failed'}")
        return OpSample(op, max(float(reply["seconds"]), 1e-9), keys, payload_bytes, float(reply["cpu_seconds"])), reply

    def run_round(self, round_index: int, ops: Sequence[str]) -> dict[str, OpSample]:
        w, n = self.workload, len(self.workload.keys)
        samples: dict[str, OpSample] = {}
        samples["set"], _ = self._call("set", round_index, n, w.batch_bytes)
        if "get" in ops:
            sample, reply = self._call("get", round_index, n, w.batch_bytes)
            mismatches = reply.get("mismatches") or []
            if mismatches:
                first = mismatches[0]
                where = f" at byte offset {first['offset']}" if first.get("offset") is not None else ""
                raise PeerFailed(f"GET read back wrong data ({len(mismatches)}+ keys): key {first['key']!r}: "
                                 f"{first['reason']}{where}")
            samples["get"] = sample
        if "exists" in ops:
            repeat = w.exists_repeat
            samples["exists"], reply = self._call("exists", round_index, n * repeat, 0, repeat=repeat)
            if reply.get("true_count") != n * repeat:
                raise PeerFailed(f"EXISTS found {reply.get('true_count')} of {n * repeat} keys just written")
        return samples

    def close(self) -> None:
        self.channel.close({"op": "close"})
