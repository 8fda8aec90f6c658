"""memtier_benchmark as a peer (``--compare memtier --memtier PATH``): per round one SET run and
one GET run of memtier over its own K keys under the run's prefix, on the same server as
lmcache_resp, with the seeds' flags (memtier.py builds the command lines and reads the JSON).

The regime is the same for both clients: every round writes new keys. lmcache_resp deletes its
keys at the end of its round, and so does this peer, so neither ever overwrites a value.

What is verified. memtier checks nothing of what GET returns, and its --data-verify works only
with --data-import, so:
- from memtier's own JSON, each run made exactly K requests, with no connection error and not
  interrupted, moved at least the K values' bytes (sent for SET, received for GET), and its GETs
  hit every key (no miss);
- after both timed runs, every one of the K keys is read back through lmcache_resp's RedisClient
  (untimed): each holds exactly the value size, every byte ``x``, which is what memtier sends
  without --random-data; then every key is deleted, and each must have existed.
memtier never has its GET replies checked byte by byte: that is the one thing it reports
without proof.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

import numpy as np

from lmcache_resp import RedisClient
from lmcache_resp.errors import RespError, ValueTooLargeError
from lmcache_resp.bench import memtier
from lmcache_resp.bench.binaries import version_of
from lmcache_resp.bench.errors import BenchError, PeerFailed
from lmcache_resp.bench.measure import OpSample, cpu_seconds
from lmcache_resp.bench.target import KeyLedger, Target

__all__ = ["MemtierPeer"]

# The byte memtier fills its values with when --random-data is not given (obj_gen.cpp).
MEMTIER_FILL = ord("x")


class MemtierPeer:
    name = "memtier"
    supported_ops = ("set", "get")

    def __init__(self, target: Target, ledger: KeyLedger, *, binary: str | None, num_keys: int,
                 chunk_bytes: int) -> None:
        found = shutil.which(binary or memtier.DEFAULT_BINARY)
        if found is None:
            raise BenchError(f"--compare memtier: {binary or memtier.DEFAULT_BINARY!r} is not an executable memtier_benchmark "
                             "(build one with scripts/setup-memtier.sh and give it with --memtier PATH)")
        s = target.settings
        if s.password is not None:
            raise BenchError("--compare memtier: memtier_benchmark takes a password only on its command line "
                             "(--authenticate), where other local users could read it; compare on a server without one")
        if s.ssl:
            raise BenchError("--compare memtier: not wired for TLS here (compare over TLS with redis-py)")
        self.binary, self.target = found, target
        self.num_keys, self.chunk_bytes = num_keys, chunk_bytes
        self.get_threads = memtier.usable_cpus()
        self.endpoint = memtier.Endpoint(host=s.host, port=s.port, unix_path=s.unix_path, db=s.db or 0)
        self.key_prefix = f"{ledger.prefix}memtier:"
        self.keys = [f"{self.key_prefix}{i}" for i in range(1, num_keys + 1)]
        ledger.register(self.keys)
        self.timeout = s.timeout + 30
        self.version = version_of(found, "memtier", memtier.parse_version, expected="memtier_benchmark")
        self.scratch = tempfile.TemporaryDirectory(prefix="lmcache-resp-memtier-")
        self.buffer = np.empty(chunk_bytes, dtype=np.uint8)
        try:
            self.client = RedisClient(**target.connect_kwargs())
        except RespError as exc:
            self.scratch.cleanup()
            raise BenchError(f"--compare memtier: cannot connect to {target.endpoint}: {exc}") from None

    def describe(self) -> str:
        return (f"memtier_benchmark {self.version}: SET --pipeline={memtier.SET_PIPELINE} "
                f"--clients={memtier.SET_CLIENTS} --threads=1, GET --clients={memtier.GET_CLIENTS} "
                f"--threads={self.get_threads} (the CPUs this process may use), --key-pattern=P:P over "
                f"{self.num_keys} keys, each once; both clients write new keys every round (each deletes its keys "
                "after its round); its GET replies are not checked by memtier: every value is read back and "
                "checked afterwards")

    def _run(self, op: str) -> OpSample:
        json_path = os.path.join(self.scratch.name, f"{op}.json")
        if os.path.exists(json_path):
            os.unlink(json_path)
        command = memtier.memtier_command(
            self.binary, self.endpoint, op, key_prefix=self.key_prefix, num_keys=self.num_keys,
            chunk_bytes=self.chunk_bytes, get_threads=self.get_threads, json_path=json_path,
        )
        cpu_before = cpu_seconds(resource.RUSAGE_CHILDREN)
        try:
            done = subprocess.run(command, capture_output=True, timeout=self.timeout, check=False)
        except subprocess.TimeoutExpired:
            raise PeerFailed(f"{op.upper()} did not finish within {self.timeout:g} s (peer hung)") from None
        cpu = cpu_seconds(resource.RUSAGE_CHILDREN) - cpu_before
        said = (done.stdout + done.stderr).decode(errors="replace").strip()
        if done.returncode != 0:
            raise PeerFailed(f"{op.upper()} failed (exit {done.returncode}): {said[-300:]}")
        try:
            with open(json_path, encoding="utf-8") as f:
                doc = json.load(f)
            run = memtier.parse_run(doc, op, num_keys=self.num_keys, chunk_bytes=self.chunk_bytes)
        except (OSError, ValueError) as exc:
            raise PeerFailed(f"{op.upper()}: {exc}") from None
        return OpSample(op, run.seconds, self.num_keys, self.num_keys * self.chunk_bytes, cpu)

    def run_round(self, round_index: int, ops: Sequence[str]) -> dict[str, OpSample]:
        samples = {"set": self._run("set")}
        if "get" in ops:
            samples["get"] = self._run("get")
        try:
            self._check_and_delete()
        except RespError as exc:
            raise PeerFailed(f"reading back memtier's keys failed: {type(exc).__name__}: {exc}") from exc
        return samples

    def _check_and_delete(self) -> None:
        """Every key holds exactly what memtier sends (chunk_bytes of 'x'); then deleted."""
        for key in self.keys:
            self.buffer.fill(0)
            try:
                length = self.client.get(key, self.buffer.data)
            except ValueTooLargeError:
                raise PeerFailed(f"key {key!r} holds more than the {self.chunk_bytes} bytes memtier was asked to "
                                 "write") from None
            if length is None:
                raise PeerFailed(f"key {key!r} is missing after memtier's runs")
            if length != self.chunk_bytes:
                raise PeerFailed(f"key {key!r} holds {length} bytes, memtier was asked to write {self.chunk_bytes}")
            wrong = np.flatnonzero(self.buffer != MEMTIER_FILL)
            if len(wrong):
                raise PeerFailed(f"key {key!r} differs from memtier's value ('x' bytes) at byte offset {int(wrong[0])}")
        for key in self.keys:
            if not self.client.delete(key):
                raise PeerFailed(f"key {key!r} was gone before it was deleted")

    def close(self) -> None:
        self.client.close()
        self.scratch.cleanup()
