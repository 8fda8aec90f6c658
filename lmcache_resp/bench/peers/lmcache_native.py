"""LMCache's C++ RESP connector (lmcache.lmcache_redis.LMCacheRedisClient) as a peer.

In this interpreter when it can import the connector; otherwise in ``--lmcache-python``'s,
through lmcache_driver.py as a persistent subprocess. Either way the driver submits ONE batch
of all keys per op and verifies its own GETs.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from lmcache_resp.config import ENV_PASSWORD
from lmcache_resp.bench.errors import BenchError, PeerFailed
from lmcache_resp.bench.peers.channel import SubprocessChannel
from lmcache_resp.bench.peers.lmcache_driver import Session
from lmcache_resp.bench.samples import OpSample
from lmcache_resp.bench.target import Target
from lmcache_resp.bench.workload import Workload

__all__ = ["DRIVER", "LMCachePeer", "SETUP_HINT"]

DRIVER = Path(__file__).resolve().with_name("lmcache_driver.py")
SETUP_HINT = (
    "pass --lmcache-python PATH, a Python that can `import lmcache_peer` "
    "(prepare one with ../shared/peers/lmcache-native/setup.sh: /tmp/lmcache-peer/bin/python)"
)
# The first request imports torch and the connector: slow on a small machine.
INIT_GRACE_SECONDS = 120.0


class _Channel(Protocol):
    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]: ...
    def close(self, message: dict[str, Any] | None = None, timeout: float = 10.0) -> None: ...


class _InProcess:
    """The driver's session called directly (this interpreter has the connector)."""

    def __init__(self) -> None:
        self.session = Session()

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        return self.session.handle(message)

    def close(self, message: dict[str, Any] | None = None, timeout: float = 10.0) -> None:
        if message is not None:
            self.session.handle(message)


def _in_process_available() -> bool:
    try:
        return importlib.util.find_spec("lmcache.lmcache_redis") is not None
    except (ImportError, ValueError):
        return False


class LMCachePeer:
    name = "lmcache"

    def __init__(
        self,
        target: Target,
        workload: Workload,
        *,
        num_workers: int,
        python: str | None,
        factory: str | None = None,
    ) -> None:
        s = target.settings
        if s.unix_path is not None or s.host is None:
            raise BenchError("--compare lmcache: LMCache's connector speaks TCP over IPv4 only; give --host/--port")
        if s.db != 0:
            raise BenchError("--compare lmcache: LMCache's connector cannot SELECT a database; use db 0")
        try:
            # The connector takes IPv4 addresses only; resolve names here.
            address = socket.gethostbyname(s.host)
        except OSError as exc:
            raise BenchError(f"--compare lmcache: cannot resolve {s.host!r} to an IPv4 address: {exc}") from None
        self.workload = workload
        self.timeout = s.timeout
        self.num_workers = num_workers
        channel: _Channel
        if python is None and factory is None and _in_process_available():
            channel, factory, self.where = _InProcess(), "lmcache.lmcache_redis:LMCacheRedisClient", "in this process"
        elif python is not None:
            env = {k: v for k, v in os.environ.items() if k != ENV_PASSWORD}
            channel, self.where = SubprocessChannel([python, str(DRIVER)], env=env), f"driven through {python}"
        else:
            raise BenchError(f"--compare lmcache: LMCache's connector (lmcache.lmcache_redis) is not importable by {sys.executable}; {SETUP_HINT}")
        self.channel = channel
        init = {
            "op": "init", "factory": factory or "lmcache_peer:client", "host": address, "port": s.port,
            "num_workers": num_workers, "username": s.username or "",
            "password": s.password.reveal() if s.password is not None else "",
            "keys": workload.keys, "chunk_bytes": workload.chunk_bytes, "seed": workload.seed, "timeout": s.timeout,
        }
        try:
            reply = channel.request(init, self.timeout + INIT_GRACE_SECONDS)
        except PeerFailed as exc:
            channel.close()
            raise BenchError(f"--compare lmcache: the driver did not start: {exc}") from None
        if not reply.get("ok"):
            channel.close({"op": "close"})
            raise BenchError(f"--compare lmcache: {reply.get('error')}; {SETUP_HINT}")
        self.client_name = str(reply.get("client"))

    def describe(self) -> str:
        return (f"LMCache C++ connector {self.client_name}, {self.num_workers} workers, one batch per op, "
                f"{self.where}")

    def supports(self, op: str) -> bool:
        return True

    def _call(self, op: str, round_index: int, repeat: int = 1) -> dict[str, Any]:
        # The driver bounds its own wait by the timeout; the margin covers filling the pool
        # and verifying it.
        reply = self.channel.request(
            {"op": op, "round": round_index, "repeat": repeat}, repeat * self.timeout + 60 + self.workload.batch_bytes / 2e8
        )
        if not reply.get("ok"):
            raise PeerFailed(f"{op.upper()}: {reply.get('error') or 'failed'}")
        return reply

    def run_round(self, round_index: int, ops: Sequence[str]) -> dict[str, OpSample]:
        w, n = self.workload, len(self.workload.keys)

        def sample(op: str, reply: dict[str, Any], payload: int) -> OpSample:
            return OpSample(op, max(float(reply["seconds"]), 1e-9), n, payload, float(reply["cpu_seconds"]))

        samples = {"set": sample("set", self._call("set", round_index), w.batch_bytes)}
        if "get" in ops:
            reply = self._call("get", round_index)
            mismatches = reply.get("mismatches") or []
            if mismatches:
                first = mismatches[0]
                where = f" at byte offset {first['offset']}" if first.get("offset") is not None else ""
                raise PeerFailed(f"GET read back wrong data ({len(mismatches)}+ keys): key {first['key']!r}: "
                                 f"{first['reason']}{where}")
            samples["get"] = sample("get", reply, w.batch_bytes)
        if "exists" in ops:
            repeat = w.exists_repeat
            reply = self._call("exists", round_index, repeat=repeat)
            if reply.get("true_count") != n * repeat:
                raise PeerFailed(f"EXISTS found {reply.get('true_count')} of {n * repeat} keys just written")
            samples["exists"] = OpSample("exists", max(float(reply["seconds"]), 1e-9), n * repeat, 0,
                                         float(reply["cpu_seconds"]))
        samples["delete"] = sample("delete", self._call("delete", round_index), 0)
        return {op: samples[op] for op in ops if op in samples}

    def close(self) -> None:
        self.channel.close({"op": "close"})
