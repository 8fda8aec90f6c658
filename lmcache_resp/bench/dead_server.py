"""``--dead-server``: how long a batch takes to fail once the server is gone, lmcache_resp's
RespConnector side by side with LMCache's C++ connector (``--compare lmcache``), in one run.

A throwaway redis-server is started; each client connects, stores its ``--num-keys`` keys and
reads them back (verified: both work before the kill). The server is then killed (SIGKILL, no
goodbye to the clients) and each client times ``--dead-batches`` batches of all its keys per
operation (SET, GET, EXISTS: ``--ops``), the clients taking turns batch by batch so that both
see the same dead server at the same moments. Reported per client and operation: the first
batch after the kill (for the first operation: detection), then the median, p99 and max of
the batches after it, with the ratios LMCache / lmcache_resp. Every batch must fail: a batch
that reports success against a dead server makes the run fail (exit status 1).

Both clients are driven the same way, through LMCache's native-connector interface: one
``submit_batch_*`` of all keys, then ``select`` on ``event_fd()`` and ``drain_completions()``
until that batch's completion arrives, every wait bounded (``--timeout`` plus a grace): a
batch that never completes is reported as ``hung`` at that bound, never waited on forever.
"""

from __future__ import annotations

import json
import os
import select
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO

import numpy as np

from lmcache_resp import RespConnector, RespSettings, __version__
from lmcache_resp.bench import pattern
from lmcache_resp.bench.console import Console, format_size
from lmcache_resp.bench.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, BenchError, PeerFailed
from lmcache_resp.bench.lmcache_native import LMCachePeer
from lmcache_resp.bench.options import Options
from lmcache_resp.bench.target import Target
from lmcache_resp.bench.workload import Workload
from lmcache_resp.errors import RespError
from lmcache_resp_servers.ports import HOST
from lmcache_resp_servers.server import RedisServer

__all__ = [
    "OUTCOMES",
    "SCHEMA",
    "BatchTime",
    "ClientFigures",
    "run_dead_server",
]

SCHEMA = "lmcache-resp-bench-dead-server/1"
# A batch still without a completion this long after its timeout is reported as hung.
HANG_GRACE_S = 5.0
# The round whose pattern the keys hold (stored and verified before the kill).
LIVE_ROUND = 0
# What a batch against the dead server ended in. "passed" is a success that cannot be.
OUTCOMES = ("failed", "miss", "hung", "passed")
OPS_IN_ORDER = ("set", "get", "exists")
MAX_ERRORS_KEPT = 3


@dataclass(frozen=True)
class BatchTime:
    op: str
    seconds: float
    outcome: str  # one of OUTCOMES
    error: str = ""


@dataclass
class ClientFigures:
    name: str
    description: str
    batches: dict[str, list[BatchTime]] = field(default_factory=dict)

    def op_summary(self, op: str) -> dict[str, Any]:
        runs = self.batches.get(op, [])
        seconds = [b.seconds for b in runs]
        rest = np.asarray(seconds[1:], dtype=float)
        errors = list(dict.fromkeys(b.error for b in runs if b.error))[:MAX_ERRORS_KEPT]
        return {
            "batches": len(runs),
            "first_s": seconds[0] if seconds else None,
            "median_s": float(np.median(rest)) if rest.size else None,
            "p99_s": float(np.percentile(rest, 99)) if rest.size else None,
            "max_s": float(rest.max()) if rest.size else None,
            "total_s": float(sum(seconds)),
            "outcomes": {name: count for name, count in Counter(b.outcome for b in runs).items()},
            "errors": errors,
            "samples_s": seconds,
        }

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "ops": {op: self.op_summary(op) for op in self.batches}}


class _Client(Protocol):
    name: str

    def describe(self) -> str: ...
    def batch(self, op: str, round_index: int) -> tuple[float, bool, str, int | None, bool]: ...
    def check_live(self, round_index: int) -> str | None: ...
    def close(self) -> None: ...


class _Ours:
    """lmcache_resp's RespConnector, in this process, driven as LMCache's driver drives its peer."""

    name = "lmcache_resp"

    def __init__(self, settings: RespSettings, workload: Workload, num_workers: int) -> None:
        self.workload = workload
        self.bound = settings.timeout + HANG_GRACE_S
        self.num_workers = num_workers
        self.connector = RespConnector.from_settings(settings)
        self.fd = self.connector.event_fd()
        self.pool = np.zeros((len(workload.keys), workload.chunk_bytes), dtype=np.uint8)
        self.views = [row.data for row in self.pool]
        self.last_hits: list[bool] | None = None

    def describe(self) -> str:
        return (f"lmcache_resp {__version__} RespConnector, {self.num_workers} workers, one batch per op, "
                "in this process")

    def batch(self, op: str, round_index: int) -> tuple[float, bool, str, int | None, bool]:
        """(seconds, ok, error, keys found or None, hung)."""
        w, c = self.workload, self.connector
        if op == "set":
            for i, row in enumerate(self.pool):
                pattern.fill(row, w.seed, round_index, i)
        elif op == "get":
            self.pool.fill(pattern.POISON)
        started = time.perf_counter()
        if op == "set":
            future = c.submit_batch_set(w.keys, self.views)
        elif op == "get":
            future = c.submit_batch_get(w.keys, self.views)
        else:
            future = c.submit_batch_exists(w.keys)
        deadline = time.monotonic() + self.bound
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return time.perf_counter() - started, False, f"no completion within {self.bound:g} s", None, True
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if not ready:
                continue
            for future_id, ok, error, per_key in c.drain_completions():
                if future_id == future:
                    seconds = time.perf_counter() - started
                    self.last_hits = None if per_key is None else [bool(b) for b in per_key]
                    found = None if per_key is None else sum(map(bool, per_key))
                    return seconds, bool(ok), str(error or ""), found, False

    def check_live(self, round_index: int) -> str | None:
        """With the server up: GET every key; None when each was a hit holding its bytes, else
        what went wrong."""
        _, ok, error, _, hung = self.batch("get", round_index)
        if not ok or hung:
            return f"GET failed: {error}"
        w = self.workload
        for i, row in enumerate(self.pool):
            if self.last_hits is not None and not self.last_hits[i]:
                return f"key {w.keys[i]!r}: GET reported a miss for a key just written"
            offset = pattern.first_difference(row, w.seed, round_index, i, w.chunk_bytes)
            if offset is not None:
                return f"key {w.keys[i]!r}: bytes differ at offset {offset}"
        return None

    def close(self) -> None:
        self.connector.close()


class _Peer:
    """LMCache's C++ connector through lmcache_driver.py (its own interpreter, usually)."""

    name = "lmcache"

    def __init__(self, peer: LMCachePeer, timeout: float) -> None:
        self.peer = peer
        self.timeout = timeout

    def describe(self) -> str:
        return self.peer.describe()

    def batch(self, op: str, round_index: int) -> tuple[float, bool, str, int | None, bool]:
        # The driver bounds its own wait by the timeout; this bound covers a wedged driver.
        reply = self.peer.channel.request({"op": op, "round": round_index, "repeat": 1},
                                          self.timeout + HANG_GRACE_S + 30)
        if reply.get("hung"):
            return self.timeout, False, str(reply.get("error") or "hung"), None, True
        if "seconds" not in reply:
            raise PeerFailed(f"{op.upper()}: {reply.get('error') or 'no timing in the reply'}")
        found = reply.get("true_count")
        return float(reply["seconds"]), bool(reply.get("ok")), str(reply.get("error") or ""), \
            None if found is None else int(found), False

    def check_live(self, round_index: int) -> str | None:
        """With the server up: GET every key, verified by the driver; None when all hold their bytes."""
        reply = self.peer.channel.request({"op": "get", "round": round_index, "repeat": 1}, self.timeout + 60)
        if not reply.get("ok"):
            return f"GET failed: {reply.get('error') or reply}"
        mismatches = reply.get("mismatches") or []
        if mismatches:
            first = mismatches[0]
            return f"key {first['key']!r}: {first['reason']}"
        return None

    def close(self) -> None:
        self.peer.close()


def _outcome(op: str, ok: bool, found: int | None, keys: int, hung: bool) -> str:
    if hung:
        return "hung"
    if not ok:
        return "failed"
    if op == "set":
        return "passed"
    return "passed" if found == keys else "miss"


def _ratio(theirs: float | None, ours: float | None) -> float | None:
    if theirs is None or ours is None or ours <= 0:
        return None
    return theirs / ours


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    ms = seconds * 1e3
    return f"{ms:.3f} ms" if ms < 1 else f"{ms:.1f} ms" if ms < 1000 else f"{seconds:.2f} s"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x" if value < 100 else f"{value:.0f}x"


@dataclass
class DeadServerResult:
    options: Options
    server_version: str
    endpoint: str
    ops: tuple[str, ...]
    clients: list[ClientFigures]
    target: Target | None = None

    def ratios(self) -> dict[str, dict[str, float | None]]:
        """LMCache / lmcache_resp per op: how many times longer its batches take to fail."""
        by_name = {c.name: c for c in self.clients}
        if "lmcache" not in by_name or "lmcache_resp" not in by_name:
            return {}
        ours, theirs = by_name["lmcache_resp"], by_name["lmcache"]
        out: dict[str, dict[str, float | None]] = {}
        for op in self.ops:
            a, b = ours.op_summary(op), theirs.op_summary(op)
            out[op] = {k: _ratio(b[f"{k}_s"], a[f"{k}_s"]) for k in ("first", "median", "p99", "max")}
        return out

    @property
    def passed_batches(self) -> int:
        return sum(1 for c in self.clients for runs in c.batches.values() for b in runs if b.outcome == "passed")

    def to_json(self) -> dict[str, Any]:
        o = self.options
        return {
            "schema": SCHEMA,
            "mode": "dead-server",
            "server": {"version": self.server_version, "endpoint": self.endpoint, "killed": "SIGKILL",
                       "name": self.target.server_name if self.target else None,
                       "malloc": self.target.malloc if self.target else None, "regime": o.regime},
            "timeout_s": o.timeout,
            "num_workers": o.num_workers,
            "num_keys": o.num_keys,
            "chunk_bytes": o.chunk_bytes,
            "batches_per_op": o.dead_batches,
            "ops": list(self.ops),
            "clients": [c.to_json() for c in self.clients],
            "ratios_lmcache_over_ours": self.ratios(),
            "every_batch_failed": self.passed_batches == 0,
        }

    def lines(self) -> list[str]:
        o = self.options
        out = [
            f"dead server: {self.target.server_name if self.target else 'redis-server'} {self.server_version} on {self.endpoint} killed (SIGKILL) once each client had stored and "
            f"read back {o.num_keys} keys of {format_size(o.chunk_bytes)}; then {o.dead_batches} batches of "
            f"{o.num_keys} keys per op, clients taking turns; timeout {o.timeout:g} s",
        ]
        for c in self.clients:
            out.append(f"  {c.name}: {c.description}")
        out.append("")
        out.append(f"{'op':<7} {'client':<14} {'first batch':>12} {'median':>11} {'p99':>11} {'max':>11}   outcomes")
        ratios = self.ratios()
        for op in self.ops:
            for c in self.clients:
                s = c.op_summary(op)
                outcomes = ", ".join(f"{n} {k}" for k, n in sorted(s["outcomes"].items()))
                out.append(f"{op.upper():<7} {c.name:<14} {_ms(s['first_s']):>12} {_ms(s['median_s']):>11} "
                           f"{_ms(s['p99_s']):>11} {_ms(s['max_s']):>11}   {outcomes}")
            if op in ratios:
                r = ratios[op]
                out.append(f"{'':<7} {'lmcache/ours':<14} {_x(r['first']):>12} {_x(r['median']):>11} "
                           f"{_x(r['p99']):>11} {_x(r['max']):>11}")
        out.append("")
        out.append("first batch: the first batch of that op after the kill (the first op's is detection); median, p99, "
                   "max: the batches after it. A batch counts from its submit to its completion. lmcache/ours: LMCache's "
                   "time over ours (above 1: ours fails faster).")
        for c in self.clients:
            for op in self.ops:
                errors = c.op_summary(op)["errors"]
                if errors:
                    out.append(f"  {c.name} {op.upper()} error: {errors[0][:200]}")
        return out


def run_dead_server(options: Options, *, stdout: TextIO, stderr: TextIO, peer_factory: str | None = None) -> int:
    """The --dead-server run; returns the exit status. ``peer_factory`` (tests): the driver's
    ``module:callable`` building the peer's connector instead of LMCache's."""
    console = Console(stdout, stderr, json_mode=options.json)
    try:
        result = _measure(options, console, peer_factory)
    except BenchError as exc:
        console.warn(f"error: {exc}")
        if options.json:
            print(json.dumps({"schema": SCHEMA, "mode": "dead-server", "error": str(exc)}, indent=2), file=stdout)
        return EXIT_USAGE
    except RespError as exc:
        console.warn(f"error: the run failed: {type(exc).__name__}: {exc}")
        if options.json:
            print(json.dumps({"schema": SCHEMA, "mode": "dead-server", "error": f"{type(exc).__name__}: {exc}"},
                             indent=2), file=stdout)
        return EXIT_FAILED
    except KeyboardInterrupt:
        console.warn("interrupted")
        return EXIT_INTERRUPTED
    finally:
        console.progress.close()
    if options.json:
        print(json.dumps(result.to_json(), indent=2), file=stdout, flush=True)
    else:
        for line in result.lines():
            console.say(line)
    if result.passed_batches:
        console.warn(f"FAILED: {result.passed_batches} batch(es) reported success against a dead server")
        return EXIT_FAILED
    return EXIT_OK


def _measure(options: Options, console: Console, peer_factory: str | None) -> DeadServerResult:
    ops = tuple(op for op in OPS_IN_ORDER if op in options.ops)
    if not ops:
        raise BenchError("--dead-server times set, get and exists batches: give at least one of them in --ops")
    try:
        server = RedisServer(io_threads=options.io_threads, server=options.server,
                             keep_freed_memory=options.keeps_freed_memory)
    except RuntimeError as exc:
        raise BenchError(f"could not start a throwaway redis-server: {exc}") from None
    clients: list[_Client] = []
    try:
        version = server.version()
        settings = RespSettings.resolve(host=HOST, port=server.port, username="", password="",
                                        timeout=options.timeout, num_workers=options.num_workers)
        name = os.path.basename(server.binary)
        target = Target(settings, embedded=True, server_version=version, io_threads=server.io_threads or 1,
                        server_name=name, malloc=server.malloc(), regime=options.regime)
        prefix = f"lmcache-resp-bench:{uuid.uuid4()}:dead-server:"
        console.say(f"started a throwaway {name} {version} on {HOST}:{server.port}; it is killed mid-run")
        console.say(target.header_line())
        console.say(target.io_loop_line())

        def workload(name: str) -> Workload:
            return Workload([f"{prefix}{name}:{i}" for i in range(options.num_keys)], options.chunk_bytes, options.seed)

        ours = _Ours(settings, workload("lmcache_resp"), options.num_workers)
        clients.append(ours)
        if "lmcache" in options.compare:
            # A peer asked for that cannot start ends the run (BenchError: exit status 2).
            peer = LMCachePeer(target, workload("lmcache"), num_workers=options.num_workers,
                               python=options.lmcache_python, factory=peer_factory)
            clients.append(_Peer(peer, options.timeout))

        # Alive first: each client stores its keys and reads every byte back.
        for client in clients:
            _, ok, error, _, hung = client.batch("set", LIVE_ROUND)
            if not ok or hung:
                raise BenchError(f"{client.name}: SET failed with the server up: {error}")
            problem = client.check_live(LIVE_ROUND)
            if problem is not None:
                raise BenchError(f"{client.name}: reading back with the server up failed: {problem}")

        server.kill()  # SIGKILL, and waits until the process is gone
        figures = {c.name: ClientFigures(c.name, c.describe()) for c in clients}
        console.progress.add_total(len(ops) * options.dead_batches)
        for op in ops:
            for i in range(options.dead_batches):
                console.progress.start(f"dead server: {op.upper()} batch {i + 1}/{options.dead_batches}")
                for client in clients:
                    seconds, ok, error, found, hung = client.batch(op, LIVE_ROUND + 1 + i)
                    outcome = _outcome(op, ok, found, options.num_keys, hung)
                    figures[client.name].batches.setdefault(op, []).append(BatchTime(op, seconds, outcome, error))
                console.progress.advance()
        return DeadServerResult(options, version, f"{HOST}:{server.port}", ops, list(figures.values()), target)
    finally:
        for client in reversed(clients):
            try:
                client.close()
            except Exception as exc:  # noqa: BLE001 - reported; the run's outcome stands
                console.warn(f"warning: closing {client.name} failed: {type(exc).__name__}: {exc}")
        server.stop()

