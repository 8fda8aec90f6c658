"""redis-benchmark (Redis's C client) as a peer, per round one SET run and one GET run of
num_keys requests over num_workers connections.

Its -t set,get tests write the fixed key ``key:__rand_int__``, outside this run's prefix, so the
same SET and GET are given as explicit commands on a key under the prefix, with the value
(num_keys x 'x', as -d would send) read from stdin (-x). Without -r every request hits that
one key. redis-benchmark does not check what GET returns, and has no EXISTS.
"""

from __future__ import annotations

import csv
import io
import math
import os
import resource
import shutil
import subprocess
from collections.abc import Sequence

from lmcache_resp.bench.errors import BenchError, PeerFailed
from lmcache_resp.bench.samples import OpSample
from lmcache_resp.bench.target import Target
from lmcache_resp.bench.workload import Workload

__all__ = ["RedisBenchmarkPeer", "parse_rps"]

SUPPORTED = ("set", "get")


def parse_rps(csv_text: str) -> float:
    """Requests per second from ``redis-benchmark -q --csv`` (one test per run)."""
    rows = [row for row in csv.reader(io.StringIO(csv_text)) if row]
    for row in rows:
        if row[0] != "test" and len(row) > 1:
            return float(row[1])
    raise ValueError(f"no result row in redis-benchmark output: {csv_text.strip()[:200]!r}")


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class RedisBenchmarkPeer:
    name = "redis-benchmark"

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
        # The password travels in the environment (REDISCLI_AUTH), never on the command line.
        self.env = dict(os.environ)
        self.env.pop("REDISCLI_AUTH", None)
        if s.password is not None:
            self.env["REDISCLI_AUTH"] = s.password.reveal()
            if s.username:
                self.base += ["--user", s.username]
        version = subprocess.run([executable, "--version"], capture_output=True, text=True, check=False).stdout.split()
        self.version = version[1] if len(version) > 1 else "?"
        self.num_workers = num_workers

    def describe(self) -> str:
        return (f"redis-benchmark {self.version}, {self.num_workers} connections, one request at a time per "
                "connection, one key (no -r); GET replies not verified, no EXISTS")

    def supports(self, op: str) -> bool:
        return op in SUPPORTED

    def command(self, op: str) -> list[str]:
        return [*self.base, "-x", "SET", self.key] if op == "set" else [*self.base, "GET", self.key]

    def _run(self, op: str) -> OpSample:
        value = b"x" * self.workload.chunk_bytes if op == "set" else b""
        cpu_before = _children_cpu_seconds()
        try:
            done = subprocess.run(self.command(op), input=value, capture_output=True, env=self.env,
                                  timeout=self.timeout + 30, check=False)
        except subprocess.TimeoutExpired:
            raise PeerFailed(f"{op.upper()} did not finish within {self.timeout + 30:g} s (peer hung)") from None
        cpu = _children_cpu_seconds() - cpu_before
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
        return {op: samples[op] for op in ops if op in samples}

    def close(self) -> None:
        pass
