"""LMCache's C++ RESP connector (lmcache.lmcache_redis.LMCacheRedisClient) as a peer.

In this interpreter when it can import the connector; otherwise in ``--lmcache-python``'s,
through lmcache_driver.py as a persistent subprocess speaking JSON lines, every wait bounded (a
wedged peer is reported, never waited on forever). Either way the driver submits ONE batch of
all keys per op and verifies its own GETs.
"""

from __future__ import annotations

import collections
import importlib.util
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from lmcache_resp.bench.errors import BenchError, PeerFailed
from lmcache_resp.bench.options import ALL_OPS, PASSWORD_ENV
from lmcache_resp.bench.lmcache_driver import Session
from lmcache_resp.bench.measure import OpSample
from lmcache_resp.bench.target import Target
from lmcache_resp.bench.workload import Workload

__all__ = ["DriverRounds", "LMCachePeer", "SubprocessChannel", "peer_python"]

DRIVER = Path(__file__).resolve().with_name("lmcache_driver.py")
SETUP_HINT = (
    "pass --lmcache-python PATH, a Python that can `import lmcache_peer` "
    "(../shared/peers/lmcache-native/setup.sh DIR prepares one: DIR/bin/python)"
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


class SubprocessChannel:
    """JSON-lines request/reply with the driver in a child process."""

    def __init__(self, argv: Sequence[str], *, env: dict[str, str] | None = None) -> None:
        try:
            self.process = subprocess.Popen(
                list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
            )
        except OSError as exc:
            raise PeerFailed(f"cannot start {argv[0]}: {exc}") from None
        self._buffer = b""
        self._stderr: collections.deque[str] = collections.deque(maxlen=20)
        self._stderr_reader = threading.Thread(target=self._drain_stderr, name="peer-stderr", daemon=True)
        self._stderr_reader.start()

    @classmethod
    def driver(cls, python: str, path: Path) -> SubprocessChannel:
        """The driver at ``path`` run by ``python``; the password goes in its init request, never
        in its environment."""
        return cls([python, str(path)], env={k: v for k, v in os.environ.items() if k != PASSWORD_ENV})

    def _drain_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._stderr.append(line.decode(errors="replace").rstrip())

    def stderr_tail(self) -> str:
        lines = [line for line in self._stderr if line]
        return " | ".join(lines[-5:]) if lines else "(nothing on stderr)"

    def request(self, message: dict[str, Any], timeout: float) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        try:
            self.process.stdin.write(json.dumps(message).encode() + b"\n")
            self.process.stdin.flush()
        except OSError:
            raise PeerFailed(f"the driver is gone (exit status {self.process.poll()}); its stderr: {self.stderr_tail()}") from None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PeerFailed(f"no reply to {message.get('op')!r} within {timeout:g} s (peer hung); "
                                 f"its stderr: {self.stderr_tail()}")
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    self.process.wait(timeout=5)
                    raise PeerFailed(f"the driver exited (status {self.process.returncode}); its stderr: {self.stderr_tail()}")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self, message: dict[str, Any] | None = None, timeout: float = 10.0) -> None:
        """Asks the driver to finish (if it still answers), then makes sure it is gone."""
        try:
            if message is not None and self.process.poll() is None:
                self.request(message, timeout)
        except PeerFailed:
            pass
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait()
            for stream in (self.process.stdin, self.process.stdout):
                if stream is not None:
                    try:
                        stream.close()
                    except BrokenPipeError:
                        pass  # a request left unflushed for a driver that is gone: nothing to tell it


def peer_python(python: str | None, importable: Callable[[], bool], missing: str) -> str:
    """The interpreter a peer's driver runs in: ``python`` if given, else this one when
    ``importable()`` says it has what the peer needs; else BenchError ``missing``."""
    if python is not None:
        return python
    if importable():
        return sys.executable
    raise BenchError(missing)


def _in_process_available() -> bool:
    try:
        return importlib.util.find_spec("lmcache.lmcache_redis") is not None
    except (ImportError, ValueError):
        return False


class DriverRounds:
    """The rounds of a peer whose driver (lmcache_driver.py, lmcache_redis_driver.py) answers
    JSON-line requests on ``channel``: each op one batch of all keys, GETs verified by the
    driver; DELETE runs where the peer supports it."""

    channel: _Channel
    workload: Workload
    timeout: float
    supported_ops: Sequence[str]

    def _call(self, op: str, round_index: int, keys: int, payload_bytes: int, repeat: int = 1) -> tuple[OpSample, dict[str, Any]]:
        # The driver bounds its own wait by the timeout; the margin covers filling the pool
        # and verifying it.
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
        if "delete" in self.supported_ops:
            samples["delete"], _ = self._call("delete", round_index, n, 0)
        return samples

    def close(self) -> None:
        self.channel.close({"op": "close"})

    def _start(self, init: dict[str, Any], peer: str, hint: str) -> dict[str, Any]:
        """Sends the driver its ``init`` request; its reply, or BenchError (``--compare peer: ...``,
        the driver gone) when it did not start."""
        try:
            reply = self.channel.request(init, self.timeout + INIT_GRACE_SECONDS)
        except PeerFailed as exc:
            self.channel.close()
            raise BenchError(f"--compare {peer}: the driver did not start: {exc}") from None
        if not reply.get("ok"):
            self.channel.close({"op": "close"})
            raise BenchError(f"--compare {peer}: {reply.get('error')}; {hint}")
        return reply


class LMCachePeer(DriverRounds):
    name = "lmcache"
    supported_ops = ALL_OPS

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
            channel, self.where = SubprocessChannel.driver(python, DRIVER), f"driven through {python}"
        else:
            raise BenchError(f"--compare lmcache: LMCache's connector (lmcache.lmcache_redis) is not importable by {sys.executable}; {SETUP_HINT}")
        self.channel = channel
        init = {
            "op": "init", "factory": factory or "lmcache_peer:client", "host": address, "port": s.port,
            "num_workers": num_workers, "username": s.username or "",
            "password": s.password.reveal() if s.password is not None else "",
            "keys": workload.keys, "chunk_bytes": workload.chunk_bytes, "seed": workload.seed, "timeout": s.timeout,
        }
        reply = self._start(init, "lmcache", SETUP_HINT)
        self.client_name = str(reply.get("client"))

    def describe(self) -> str:
        return (f"LMCache C++ connector {self.client_name}, {self.num_workers} workers, one batch per op, "
                f"{self.where}")
