"""Peers measured side by side with lmcache_resp (``--compare``), each on its own keys under the
run's prefix: redis-py and redis-benchmark here, LMCache's C++ connector in lmcache_native.py, its
redis-py-based one in lmcache_redis.py, its glide-based Valkey client in lmcache_valkey.py,
memtier_benchmark in memtier_peer.py.

redis-py: num_workers threads over one ConnectionPool, each thread doing its tile of keys one
command after another (SET from memoryviews of the same pages lmcache_resp uses; GET results
kept, and verified after the timed section; EXISTS/DEL pipelined per thread).

redis-benchmark (Redis's C client): per round one SET run and one GET run of num_keys requests
over num_workers connections. Its -t set,get tests write the fixed key ``key:__rand_int__``,
outside this run's prefix, so the same SET and GET are given as explicit commands on a key under
the prefix, with the value (num_keys x 'x', as -d would send) read from stdin (-x). Without -r
every request hits that one key. redis-benchmark does not check what GET returns, and has no
EXISTS.
"""

from __future__ import annotations

import csv
import importlib
import inspect
import io
import math
import os
import resource
import shutil
import subprocess
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lmcache_resp.bench import pattern
from lmcache_resp.bench.binaries import version_of
from lmcache_resp.bench.errors import BenchError, PeerFailed
from lmcache_resp.bench.options import ALL_OPS, Options
from lmcache_resp.bench.lmcache_native import LMCachePeer
from lmcache_resp.bench.lmcache_redis import LMCacheRedisPeer
from lmcache_resp.bench.lmcache_valkey import LMCacheValkeyPeer
from lmcache_resp.bench.measure import Driver, OpSample, cpu_seconds, timed
from lmcache_resp.bench.memtier_peer import MemtierPeer
from lmcache_resp.bench.ours import OursDriver
from lmcache_resp.bench.target import KeyLedger, Target, redis_py_tls_kwargs
from lmcache_resp.bench.workload import Workload

__all__ = ["CLUSTER_PEERS", "RedisBenchmarkPeer", "RedisPyPeer", "make_peer", "parse_redis_benchmark_version", "parse_rps"]

# Peers that reach a Redis Cluster themselves: with --cluster they run on ours, not on a server
# of their own (peer_target).
CLUSTER_PEERS = ("lmcache-valkey",)


def make_peer(name: str, options: Options, target: Target, ours: OursDriver, ledger: KeyLedger) -> Driver:
    """The peer ``name``; BenchError when it cannot run here (not installed, cannot connect)."""
    w = ours.workload

    def workload() -> Workload:
        return Workload(ledger.keys(name, len(w.keys)), w.chunk_bytes, w.seed)

    if name == "redis-py":
        # Same pages as lmcache_resp (same bytes, no second pool), its own keys.
        return RedisPyPeer(target, workload(), ours.buffers, num_workers=options.num_workers)
    if name == "lmcache":
        return LMCachePeer(target, workload(), num_workers=options.num_workers, python=options.lmcache_python)
    if name == "lmcache-redis":
        return LMCacheRedisPeer(target, workload(), ledger, python=options.lmcache_redis_python)
    if name == "lmcache-valkey":
        return LMCacheValkeyPeer(target, workload(), num_workers=options.num_workers, python=options.lmcache_python)
    if name == "redis-benchmark":
        return RedisBenchmarkPeer(target, w, ledger.key("redis-benchmark"), num_workers=options.num_workers)
    if name == "memtier":
        return MemtierPeer(target, ledger, binary=options.memtier, num_keys=len(w.keys), chunk_bytes=w.chunk_bytes)
    raise ValueError(f"unknown peer {name!r}")


def _tiles(count: int, workers: int) -> list[range]:
    """``workers`` contiguous, nearly equal ranges covering 0..count-1 (empty ones dropped)."""
    workers = max(1, min(workers, count))
    base, extra = divmod(count, workers)
    out, start = [], 0
    for w in range(workers):
        size = base + (1 if w < extra else 0)
        out.append(range(start, start + size))
        start += size
    return [t for t in out if len(t)]


class RedisPyPeer:
    name = "redis-py"
    supported_ops = ALL_OPS

    def __init__(self, target: Target, workload: Workload, buffers: Sequence[pattern.Bytes], *, num_workers: int) -> None:
        try:
            # Imported by name: redis-py is an optional extra (lmcache-resp[compare]).
            redis: Any = importlib.import_module("redis")
            connection: Any = importlib.import_module("redis.connection")
            utils: Any = importlib.import_module("redis.utils")
        except ImportError:
            raise BenchError("--compare redis-py: redis-py is not installed (pip install 'redis[hiredis]')") from None
        self.workload, self.buffers = workload, buffers
        self.num_workers = num_workers
        self.version = str(redis.__version__)
        self.parser = "hiredis" if utils.HIREDIS_AVAILABLE else "pure-Python"
        s = target.settings
        kwargs: dict[str, Any] = {
            "username": s.username, "password": s.password.reveal() if s.password is not None else None, "db": s.db,
            "socket_timeout": s.timeout, "socket_connect_timeout": s.timeout, "max_connections": num_workers,
        }
        if s.unix_path is not None:
            kwargs.update(connection_class=redis.UnixDomainSocketConnection, path=s.unix_path)
        else:
            kwargs.update(host=s.host, port=s.port)
        self.tls = bool(s.ssl)
        if s.ssl:
            # redis-py's TLS (Python's ssl module over OpenSSL), with the same files and checks.
            kwargs.update(connection_class=redis.SSLConnection, **redis_py_tls_kwargs(s))
        # hiredis's packer copies every value into one bytes object; redis-py's own serializer
        # sends memoryviews as they are. The faster choice is the fair one.
        self.packer = "hiredis packer (copies values)"
        base = getattr(connection, "AbstractConnection", connection.Connection)
        if "command_packer" in inspect.signature(base.__init__).parameters:
            encoder = connection.Encoder("utf-8", "strict", False)
            kwargs["command_packer"] = connection.PythonRespSerializer(6000, encoder.encode)
            self.packer = "PythonRespSerializer (memoryview values, no copy)"
        self._errors: tuple[type[BaseException], ...] = (redis.exceptions.RedisError, OSError)
        try:
            self.pool = redis.ConnectionPool(**kwargs)
            self.client = redis.Redis(connection_pool=self.pool)
            # All connections up front, so that no round times a connect.
            for c in [self.pool.get_connection() for _ in range(num_workers)]:
                self.pool.release(c)
        except self._errors as exc:
            raise BenchError(f"--compare redis-py: cannot connect to {target.endpoint}: {exc}") from None
        self.executor = ThreadPoolExecutor(num_workers, thread_name_prefix="redis-py-peer")
        self.tiles = _tiles(len(workload.keys), num_workers)

    def describe(self) -> str:
        return (f"redis-py {self.version} ({self.parser} parser, {self.packer}), {self.num_workers} threads over "
                f"one ConnectionPool{' of TLS connections' if self.tls else ''}, each its tile of keys one command "
                "at a time")

    def _parallel(self, work: Callable[[range], None]) -> None:
        for future in [self.executor.submit(work, tile) for tile in self.tiles]:
            future.result()

    def run_round(self, round_index: int, ops: Sequence[str]) -> dict[str, OpSample]:
        try:
            return self._round(round_index, ops)
        except self._errors as exc:
            raise PeerFailed(f"{type(exc).__name__}: {exc}") from exc

    def _round(self, round_index: int, ops: Sequence[str]) -> dict[str, OpSample]:
        w, keys, client, buffers = self.workload, self.workload.keys, self.client, self.buffers
        n, nbytes = len(keys), w.batch_bytes
        w.fill(buffers, round_index)

        def set_tile(tile: range) -> None:
            for i in tile:
                client.set(keys[i], buffers[i].data)  # a memoryview: no copy

        samples: dict[str, OpSample] = {}
        samples["set"], _ = timed("set", n, nbytes, lambda: self._parallel(set_tile))
        if "get" in ops:
            read: list[bytes | None] = [None] * n

            def get_tile(tile: range) -> None:
                for i in tile:
                    read[i] = client.get(keys[i])

            samples["get"], _ = timed("get", n, nbytes, lambda: self._parallel(get_tile))
            mismatches = w.verify(self.name, round_index, read)
            del read
            if mismatches:
                raise PeerFailed(f"GET read back wrong data: {mismatches[0].describe()}")
        if "exists" in ops:
            repeat = w.exists_repeat
            samples["exists"], answers = timed(
                "exists", n * repeat, 0, lambda: [self._pipelined("exists") for _ in range(repeat)]
            )
            for found in answers:
                if sum(found) != n:
                    raise PeerFailed(f"EXISTS found {sum(found)} of {n} keys just written")
        samples["delete"], _ = timed("delete", n, 0, lambda: self._pipelined("delete"))
        return samples

    def _pipelined(self, command: str) -> list[int]:
        """EXISTS or DEL of every key, one pipeline per thread over its tile."""
        out: list[int] = [0] * len(self.workload.keys)

        def tile_work(tile: range) -> None:
            pipe = self.client.pipeline(transaction=False)
            for i in tile:
                getattr(pipe, command)(self.workload.keys[i])
            for i, value in zip(tile, pipe.execute()):
                out[i] = int(value)

        self._parallel(tile_work)
        return out

    def close(self) -> None:
        self.executor.shutdown(wait=True)
        self.pool.disconnect()


def parse_rps(csv_text: str) -> float:
    """Requests per second from ``redis-benchmark -q --csv`` (one test per run)."""
    rows = [row for row in csv.reader(io.StringIO(csv_text)) if row]
    for row in rows:
        if row[0] != "test" and len(row) > 1:
            return float(row[1])
    raise ValueError(f"no result row in redis-benchmark output: {csv_text.strip()[:200]!r}")


def parse_redis_benchmark_version(text: str) -> str | None:
    """``7.0.15`` from ``redis-benchmark --version`` (``redis-benchmark 7.0.15``; Valkey's
    ``valkey-benchmark 8.1.1``); None for what neither says."""
    words = text.split()
    if len(words) < 2 or words[0] not in ("redis-benchmark", "valkey-benchmark"):
        return None
    return words[1]


class RedisBenchmarkPeer:
    name = "redis-benchmark"
    supported_ops = ("set", "get")

    def __init__(self, target: Target, workload: Workload, key: str, *, num_workers: int) -> None:
        executable = shutil.which("redis-benchmark")
        if executable is None:
            raise BenchError("--compare redis-benchmark: redis-benchmark is not on PATH (Debian: apt-get install redis-tools)")
        s = target.settings
        self.workload, self.key, self.timeout = workload, key, s.timeout
        where = ["-s", s.unix_path] if s.unix_path is not None else ["-h", str(s.host), "-p", str(s.port)]
        self.base = [executable, *where, "-c", str(num_workers), "-n", str(len(workload.keys)), "-q", "--csv"]
        if s.db:
            self.base += ["--dbnum", str(s.db)]
        if s.ssl:
            self.base += ["--tls"] + (["--cacert", s.ssl_ca_certs] if s.ssl_ca_certs else [])
            self.base += ["--cert", s.ssl_certfile, "--key", s.ssl_keyfile] if s.ssl_certfile and s.ssl_keyfile else []
            self.base += ["--insecure"] if s.ssl_cert_reqs == "none" else []
        # The password travels in the environment (REDISCLI_AUTH), never on the command line.
        self.env = dict(os.environ)
        self.env.pop("REDISCLI_AUTH", None)
        if s.password is not None:
            self.env["REDISCLI_AUTH"] = s.password.reveal()
            if s.username:
                self.base += ["--user", s.username]
        self.version = version_of(executable, "redis-benchmark", parse_redis_benchmark_version, expected="redis-benchmark")
        self.num_workers = num_workers

    def describe(self) -> str:
        return (f"redis-benchmark {self.version}, {self.num_workers} connections, one request at a time per "
                "connection, one key (no -r); GET replies not verified, no EXISTS")

    def _run(self, op: str) -> OpSample:
        command = [*self.base, "-x", "SET", self.key] if op == "set" else [*self.base, "GET", self.key]
        value = b"x" * self.workload.chunk_bytes if op == "set" else b""
        cpu_before = cpu_seconds(resource.RUSAGE_CHILDREN)
        try:
            done = subprocess.run(command, input=value, capture_output=True, env=self.env,
                                  timeout=self.timeout + 30, check=False)
        except subprocess.TimeoutExpired:
            raise PeerFailed(f"{op.upper()} did not finish within {self.timeout + 30:g} s (peer hung)") from None
        cpu = cpu_seconds(resource.RUSAGE_CHILDREN) - cpu_before
        out = done.stdout.decode(errors="replace")
        everything = out + done.stderr.decode(errors="replace")
        if "NOAUTH" in everything and "REDISCLI_AUTH" in self.env:
            raise PeerFailed("this redis-benchmark does not read the password from $REDISCLI_AUTH, and it is not put on "
                             "its command line (-a), where other local users could read it")
        if done.returncode != 0 or "ERR" in out or "NOAUTH" in out:
            raise PeerFailed(f"{op.upper()} failed (exit {done.returncode}): {everything.strip()[:300]}")
        try:
            rps = parse_rps(out)
        except ValueError as exc:
            raise PeerFailed(str(exc)) from None
        if not math.isfinite(rps) or rps <= 0:
            # Its clock counts whole milliseconds: a run shorter than one reads as infinitely fast.
            raise PeerFailed(f"{op.upper()} finished too fast for redis-benchmark's millisecond clock "
                             f"({rps} requests/s): use more --num-keys or a larger --chunk-mb")
        n = len(self.workload.keys)
        return OpSample(op, n / rps, n, n * self.workload.chunk_bytes, cpu)

    def run_round(self, round_index: int, ops: Sequence[str]) -> dict[str, OpSample]:
        samples = {"set": self._run("set")}
        if "get" in ops:
            samples["get"] = self._run("get")
        return samples

    def close(self) -> None:
        pass
