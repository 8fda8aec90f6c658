"""``--compare lmcache-l2``: LMCache's own benchmark, ``lmcache bench l2``, run from LMCache's
interpreter (``--lmcache-python``) for three L2 adapters against the same throwaway server or
cluster: ours (``native_plugin`` loading lmcache_resp.RespConnector), LMCache's C++ ``resp``
adapter (one server only: skipped on a cluster) and its glide-based ``valkey`` adapter.

For every cell (value size x keys per submit) and in-flight depth, the adapters run one after the
other, ``--rounds`` alternations, the order reversed each alternation (ABBA), every run with
``--no-skip-verify --lookup-max-hit-rate 1.0`` and the server flushed before it (FLUSHALL on
every primary). In the steady regime one untimed run goes first in each cell, so the server has
the memory the runs need before any is timed. Reported per cell and op (store, load, lookup):
each adapter's median over the alternations of LMCache's p50 round time, its spread (min-max),
and the ratios ours/peer as throughput ratios (the peer's time over ours). A run that fails
LMCache's verification, exits with an error, hangs, or whose load or lookup found fewer keys
than it stored is reported as a failure (exit status 1) and left out of the figures.

The child runs with LMCACHE_TRACK_USAGE=false and LMCACHE_DISABLE_BANNER=1, no LMCACHE_RESP_*
variables (the throwaway server has no password) and PYTHONPATH reaching exactly the
lmcache_resp package this bench runs from (a folder holding a link to it, nothing else).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lmcache_resp
from lmcache_resp_servers.wire import ReplyError, command
from lmcache_resp.bench.console import GB, KiB, Console, format_size, table_lines
from lmcache_resp.bench.errors import BenchError
from lmcache_resp.bench.host import meminfo_bytes
from lmcache_resp.bench.lmcache_native import peer_python
from lmcache_resp.bench.options import PASSWORD_ENV, Options
from lmcache_resp.bench.target import Target

__all__ = [
    "OPS",
    "Cell",
    "L2Result",
    "L2Run",
    "adapter_spec",
    "alternation_order",
    "bench_argv",
    "flush",
    "purge",
    "read_result",
    "run_bytes",
    "run_lmcache_l2",
    "server_rss",
    "steady_rss_limit",
]

OPS = ("store", "load", "lookup")
# The operation names of LMCache's JSON (its sections' "operation").
LMCACHE_OPS = {"Store": "store", "Load": "load", "Lookup": "lookup"}
LMCACHE_WARMUP_ROUNDS = 1  # its --warmup-rounds inside each run
# The alternation number of the steady regime's untimed run.
WARMUP = -1
# A run must finish within this plus a bound per round (LMCache waits up to 120 s per round
# itself); one that does not is killed and reported as hung.
RUN_GRACE_S = 120.0
ROUND_BOUND_S = 10.0
FLUSH_TIMEOUT_S = 60.0
# How long a purged server's reported memory may take to come down.
PURGE_SETTLE_S = 2.0
LMCACHE_HINT = ("pass --lmcache-python PATH, a Python with LMCache installed (scripts/test-lmcache.sh builds one: "
                "target/lmcache-0.5.6/venv/bin/python)")
# What the child interpreter has: run as `PYTHON -c PROBE` with the runs' environment.
PROBE = """\
import importlib.metadata as metadata, importlib.util as util, json, sys
def version(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
out = {"python": sys.version.split()[0], "lmcache": None, "glide": None, "lmcache_resp": None, "error": None}
try:
    if util.find_spec("lmcache") is not None and util.find_spec("lmcache.cli.main") is not None:
        out["lmcache"] = version("lmcache") or "?"
    if util.find_spec("glide_sync") is not None:
        out["glide"] = version("valkey-glide-sync") or "?"
    import lmcache_resp
    out["lmcache_resp"] = lmcache_resp.__file__
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Cell:
    value_bytes: int
    keys: int
    in_flight: int

    @property
    def round_bytes(self) -> int:
        return self.value_bytes * self.keys * self.in_flight

    @property
    def label(self) -> str:
        return f"{format_size(self.value_bytes)} x {self.keys}, {self.in_flight} in flight"

    def to_json(self) -> dict[str, int]:
        return {"value_bytes": self.value_bytes, "keys": self.keys, "in_flight": self.in_flight}


@dataclass
class L2Run:
    adapter: str
    cell: Cell
    alternation: int  # WARMUP for the steady regime's untimed run
    p50_ms: dict[str, float] = field(default_factory=dict)
    wall_seconds: float = 0.0
    failure: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"adapter": self.adapter, "cell": self.cell.to_json(), "alternation": self.alternation,
                "warmup": self.alternation == WARMUP, "p50_ms": self.p50_ms, "wall_seconds": self.wall_seconds,
                "failure": self.failure}


def cells(options: Options) -> list[Cell]:
    return [Cell(value, keys, depth) for value, keys in options.l2_cells for depth in options.l2_in_flight]


def alternation_order(adapters: Sequence[str], alternation: int) -> list[str]:
    """ABBA: the adapters in order, then reversed, then in order ..."""
    return list(adapters) if alternation % 2 == 0 else list(reversed(adapters))


def _nodes(target: Target) -> list[tuple[str, int]]:
    out = []
    for endpoint in target.settings.endpoints:
        host, _, port = endpoint.rpartition(":")
        out.append((host.strip("[]"), int(port)))
    return out


def adapter_spec(name: str, target: Target, options: Options) -> tuple[dict[str, Any] | None, str]:
    """The ``--l2-adapter`` JSON of adapter ``name`` for ``target``; (None, why) where it
    cannot reach it."""
    workers = options.num_workers
    cluster = bool(target.settings.cluster)
    nodes = _nodes(target)
    if name == "ours":
        params: dict[str, Any]
        if cluster:
            params = {"url": "redis://" + ",".join(f"{h}:{p}" for h, p in nodes), "cluster": True}
        else:
            params = {"host": nodes[0][0], "port": nodes[0][1]}
        params["num_workers"] = options.ours_workers
        # LMCache's process has no LMCACHE_RESP_* variables: the loop this run asked for
        # (LMCACHE_RESP_IO_BACKEND included) goes with the params.
        params["io_backend"] = target.settings.io_backend
        if options.get_piece_bytes is not None:
            params["get_piece_bytes"] = options.get_piece_bytes
        if options.ours_connections_per_worker is not None:
            params["connections_per_worker"] = options.ours_connections_per_worker
        if options.cpu_affinity is not None:
            params["cpu_affinity"] = options.cpu_affinity
        return {"type": "native_plugin", "module_path": "lmcache_resp.lmcache.mp", "class_name": "RespConnector",
                "adapter_params": params}, ""
    if name == "resp":
        if cluster:
            return None, "LMCache's resp adapter has no cluster mode (it reaches one host:port)"
        return {"type": "resp", "host": nodes[0][0], "port": nodes[0][1], "num_workers": workers}, ""
    if name == "floor":
        return {"type": "native_plugin", "module_path": "lmcache_resp.bench.l2_floor", "class_name": "NullConnector",
                "adapter_params": {}}, ""
    if name == "valkey":
        spec: dict[str, Any] = {"type": "valkey", "startup_nodes": ",".join(f"{h}:{p}" for h, p in nodes),
                                "num_workers": workers}
        if cluster:
            spec["cluster_mode"] = True
        return spec, ""
    raise ValueError(f"unknown L2 adapter {name!r}")


def bench_argv(python: str, spec: dict[str, Any], cell: Cell, rounds: int, output: str) -> list[str]:
    """One ``lmcache bench l2`` run (the ``lmcache`` console script is ``lmcache.cli.main``)."""
    return [
        python, "-m", "lmcache.cli.main", "bench", "l2", "--l2-adapter", json.dumps(spec, separators=(",", ":")),
        "--num-keys", str(cell.keys), "--in-flight", str(cell.in_flight), "--data-size-kb", str(cell.value_bytes // KiB),
        "--rounds", str(rounds), "--warmup-rounds", str(LMCACHE_WARMUP_ROUNDS), "--no-skip-verify",
        "--lookup-max-hit-rate", "1.0", "--format", "json", "--output", output,
    ]


def read_result(doc: Any, cell: Cell, rounds: int) -> tuple[dict[str, float], str | None]:
    """The p50 round time per op (ms) from LMCache's JSON, and what is wrong with the run (None:
    nothing): every key stored, and load and lookup finding every key stored."""
    try:
        sections = {LMCACHE_OPS[s["operation"]]: s for s in doc["metrics"].values()
                    if isinstance(s, dict) and s.get("operation") in LMCACHE_OPS}
        missing = [op for op in OPS if op not in sections]
        if missing:
            return {}, f"no {', '.join(missing)} result in LMCache's output"
        p50 = {op: float(sections[op]["duration_p50_ms"]) for op in OPS}
        expected = rounds * cell.keys * cell.in_flight
        problems = [f"{op}: {int(sections[op]['rounds_timed_out'])} rounds timed out" for op in OPS
                    if int(sections[op]["rounds_timed_out"])]
        stored = int(sections["store"]["total_success"])
        if stored < expected:
            problems.append(f"store: {stored} of {expected} keys stored")
        for op, found in (("load", "loaded"), ("lookup", "found")):
            success = int(sections[op]["total_success"])
            if success < stored:
                problems.append(f"{op}: {success} of the {stored} keys stored were {found}")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return {}, f"unreadable result ({type(exc).__name__}: {exc})"
    return p50, "; ".join(problems) or None


def flush(target: Target, *, keep_memory: bool) -> None:
    """FLUSHALL on every primary, and wait until the data is gone. A synchronous FLUSHALL on a
    jemalloc-built Redis also purges the allocator: the fresh regime gets exactly that, the
    steady one an ASYNC flush, which keeps the memory."""
    nodes = _nodes(target)
    try:
        for host, port in nodes:
            command(port, "FLUSHALL", "ASYNC" if keep_memory else "SYNC", host=host, timeout=FLUSH_TIMEOUT_S)
        deadline = time.monotonic() + FLUSH_TIMEOUT_S
        for host, port in nodes:
            while _pending_frees(host, port) or command(port, "DBSIZE", host=host) != 0:
                if time.monotonic() > deadline:
                    raise BenchError(f"{host}:{port} still holds data {FLUSH_TIMEOUT_S:g} s after FLUSHALL")
                time.sleep(0.01)
    except (OSError, ReplyError) as exc:
        raise BenchError(f"could not flush the throwaway server: {type(exc).__name__}: {exc}") from None


def _pending_frees(host: str, port: int) -> int:
    return _memory_field(host, port, "lazyfree_pending_objects")


def _memory_field(host: str, port: int, name: str) -> int:
    reply = command(port, "INFO", "memory", host=host)
    text = reply.decode(errors="replace") if isinstance(reply, bytes) else ""
    for line in text.splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split(":", 1)[1])
    return 0


def server_rss(target: Target) -> int:
    """The resident memory of every primary together (INFO memory's used_memory_rss)."""
    try:
        return sum(_memory_field(host, port, "used_memory_rss") for host, port in _nodes(target))
    except (OSError, ReplyError, ValueError) as exc:
        raise BenchError(f"could not read the throwaway server's memory: {type(exc).__name__}: {exc}") from None


def run_bytes(cell: Cell, bench_rounds: int) -> int:
    """What one `lmcache bench l2` run stores: new keys every round, its warm-up round's too."""
    return (bench_rounds + LMCACHE_WARMUP_ROUNDS) * cell.round_bytes


def steady_rss_limit(baseline: int, cell: Cell, bench_rounds: int) -> int:
    """How much a server that keeps what it frees may hold after a flush before it is purged: its
    size when started plus two runs' data. Its allocator reuses most of a flushed run's memory
    but not all (on Redis 7.0 with jemalloc's decay off, 1 MiB x 32 at 4 in flight went from 0.82
    to 1.64 GB over four 0.8 GB runs); left alone, a cell of 13 runs outgrew the machine."""
    return baseline + 2 * run_bytes(cell, bench_rounds)


def purge(target: Target) -> None:
    """Hands a flushed server's freed memory back to the kernel: MEMORY PURGE on every primary
    (jemalloc-built Redis and Valkey; a no-op on other allocators)."""
    try:
        for host, port in _nodes(target):
            command(port, "MEMORY", "PURGE", host=host, timeout=FLUSH_TIMEOUT_S)
    except (OSError, ReplyError) as exc:
        raise BenchError(f"could not purge the throwaway server: {type(exc).__name__}: {exc}") from None


@dataclass(frozen=True)
class Purge:
    """A steady server purged after a flush, before a timed run (then re-warmed, untimed); or
    restarted, where MEMORY PURGE could not shrink it."""
    cell: Cell
    rss_before: int
    limit: int
    rss_after: int
    restarted: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"cell": self.cell.to_json(), "rss_before": self.rss_before, "limit": self.limit,
                "rss_after": self.rss_after, "restarted": self.restarted}


@dataclass
class L2Result:
    options: Options
    target: Target
    python: str
    versions: dict[str, Any]
    specs: dict[str, dict[str, Any]]  # the adapters measured, in order
    skipped: dict[str, str]  # adapter -> why it was not measured
    runs: list[L2Run] = field(default_factory=list)
    purges: list[Purge] = field(default_factory=list)
    # A steady server's size when started (after a purge that could not shrink it: its size then).
    rss_baseline: int = 0

    @property
    def cells(self) -> list[Cell]:
        return cells(self.options)

    @property
    def failures(self) -> list[L2Run]:
        return [run for run in self.runs if run.failure is not None]

    def timed(self, cell: Cell, adapter: str) -> list[L2Run]:
        """The adapter's timed, successful runs in ``cell``, by alternation."""
        return [r for r in self.runs if r.cell == cell and r.adapter == adapter and r.alternation != WARMUP
                and r.failure is None]

    def samples(self, cell: Cell, adapter: str, op: str) -> list[float]:
        return [r.p50_ms[op] for r in self.timed(cell, adapter)]

    def ratio(self, cell: Cell, peer: str, op: str) -> tuple[float | None, list[float]]:
        """ours/peer as a throughput ratio: the peer's median p50 over ours; and the same ratio
        within each alternation both completed."""
        ours, theirs = self.samples(cell, "ours", op), self.samples(cell, peer, op)
        if not ours or not theirs or statistics.median(ours) <= 0:
            return None, []
        mine = {r.alternation: r.p50_ms[op] for r in self.timed(cell, "ours")}
        paired = [r.p50_ms[op] / mine[r.alternation] for r in self.timed(cell, peer)
                  if mine.get(r.alternation, 0) > 0]
        return statistics.median(theirs) / statistics.median(ours), paired

    def preamble(self) -> list[str]:
        o = self.options
        lines = [f"LMCache's own benchmark, `lmcache bench l2`: LMCache {self.versions.get('lmcache')} "
                 f"(Python {self.versions.get('python')}, {self.python}), lmcache_resp {lmcache_resp.__version__} "
                 f"from {Path(lmcache_resp.__file__).parent}; {o.num_workers} workers per adapter"
                 + (f" (ours: {o.ours_shape_text()})" if o.ours_shape else "")]
        for name, spec in self.specs.items():
            lines.append(f"  {name}: --l2-adapter '{json.dumps(spec, separators=(',', ':'))}'")
        for name, why in self.skipped.items():
            lines.append(f"  {name}: not measured: {why}")
        flush_kind = "ASYNC on every primary (it keeps the memory)" if o.keeps_freed_memory else "SYNC on every primary"
        lines.append(
            f"each run: --num-keys K --in-flight F --data-size-kb S --rounds {o.l2_bench_rounds} --warmup-rounds "
            f"{LMCACHE_WARMUP_ROUNDS} --no-skip-verify --lookup-max-hit-rate 1.0, after FLUSHALL {flush_kind}; {o.rounds} alternation{'s' if o.rounds != 1 else ''} per cell, the order reversed each time "
            f"(ABBA){'; first, one untimed run per cell' if o.keeps_freed_memory else ''}")
        return lines

    def lines(self) -> list[str]:
        peers = [name for name in self.specs if name != "ours"]
        out: list[str] = []
        for cell in self.cells:
            out += ["", f"{cell.label} ({format_size(cell.round_bytes)} per round): LMCache's p50 round time, ms, "
                        f"median [min-max] over the alternations"]
            rows = [["op", *self.specs, *(f"ours/{p}" for p in peers if "ours" in self.specs)]]
            for op in OPS:
                row = [op]
                for name in self.specs:
                    values = self.samples(cell, name, op)
                    row.append(f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]" if values else "n/a")
                if "ours" in self.specs:
                    for peer in peers:
                        ratio, paired = self.ratio(cell, peer, op)
                        row.append("n/a" if ratio is None else
                                   f"{ratio:.2f}x [{min(paired):.2f}-{max(paired):.2f}]" if paired else f"{ratio:.2f}x")
                rows.append(row)
            out += table_lines(rows, numbers_right=False)
        out += ["", "ours/peer = the peer's median p50 over ours (a throughput ratio: above 1, ours is faster); "
                    "[min-max] of that ratio within each alternation. LMCache reports p50s rounded to 0.01 ms."]
        if "floor" in self.specs:
            out.append("floor = a connector without a server (lmcache_resp.bench.l2_floor): LMCache's adapter, demux "
                       "thread and bench loop alone, plus one memory copy per load; ours/floor is the share of our "
                       "time that is LMCache's own.")
        if self.purges:
            restarts = sum(purge.restarted for purge in self.purges)
            how = f"purged ({restarts} of them by a restart, where MEMORY PURGE could not shrink it)" if restarts else "purged"
            out.append(f"The steady server outgrew its size at start plus two runs' data {len(self.purges)} time"
                       f"{'s' if len(self.purges) != 1 else ''}: {how}, then re-warmed with an untimed run each time "
                       "(\"purges\" in --json).")
        failures = self.failures
        if failures:
            out.append(f"FAILED runs, left out of the figures ({len(failures)}):")
            for run in failures:
                when = "the untimed warm-up run" if run.alternation == WARMUP else f"alternation {run.alternation + 1}"
                out.append(f"  {run.adapter}, {run.cell.label}, {when}: {run.failure}")
        return out

    def to_json(self) -> dict[str, Any]:
        summary = []
        for cell in self.cells:
            ops: dict[str, Any] = {}
            for op in OPS:
                entry: dict[str, Any] = {}
                for name in self.specs:
                    values = self.samples(cell, name, op)
                    median = statistics.median(values) if values else None
                    entry[name] = {
                        "p50_ms": values, "median_ms": median,
                        "min_ms": min(values) if values else None, "max_ms": max(values) if values else None,
                        "gb_per_s": cell.round_bytes / GB / (median / 1e3) if median and op != "lookup" else None,
                    }
                ratios = {}
                if "ours" in self.specs:
                    for peer in (name for name in self.specs if name != "ours"):
                        ratio, paired = self.ratio(cell, peer, op)
                        ratios[peer] = {"ours_over_peer": ratio, "per_alternation": paired}
                ops[op] = {"adapters": entry, "ratios": ratios}
            summary.append({**cell.to_json(), "ops": ops})
        return {
            "mode": "lmcache-l2",
            "python": self.python,
            "versions": self.versions,
            "lmcache_resp_path": str(Path(lmcache_resp.__file__).parent),
            "bench_rounds": self.options.l2_bench_rounds,
            "alternations": self.options.rounds,
            "adapters": self.specs,
            "skipped": self.skipped,
            "cells": summary,
            "runs": [run.to_json() for run in self.runs],
            "purges": [purge.to_json() for purge in self.purges],
            "failures": len(self.failures),
            "verified": not self.failures,
        }


class _Runner:
    """Runs ``lmcache bench l2`` in the child interpreter, one run at a time."""

    def __init__(self, options: Options, python: str, scratch: Path) -> None:
        self.options = options
        self.python = python
        self.scratch = scratch
        # PYTHONPATH reaches exactly this lmcache_resp: a folder holding a link to it.
        path = scratch / "path"
        path.mkdir()
        (path / "lmcache_resp").symlink_to(Path(lmcache_resp.__file__).resolve().parent, target_is_directory=True)
        env = {k: v for k, v in os.environ.items() if k != PASSWORD_ENV and not k.startswith("LMCACHE_RESP_")}
        inherited = env.get("PYTHONPATH")
        env.update(LMCACHE_TRACK_USAGE="false", LMCACHE_DISABLE_BANNER="1",
                   PYTHONPATH=str(path) + (os.pathsep + inherited if inherited else ""))
        self.env = env
        self.count = 0

    def probe(self) -> dict[str, Any]:
        try:
            done = subprocess.run([self.python, "-c", PROBE], capture_output=True, text=True, env=self.env,
                                  stdin=subprocess.DEVNULL, timeout=RUN_GRACE_S, check=False)
            versions: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as exc:
            raise BenchError(f"--compare lmcache-l2: {self.python} did not answer what it has ({type(exc).__name__}: "
                             f"{exc}); {LMCACHE_HINT}") from None
        if versions.get("lmcache") is None:
            raise BenchError(f"--compare lmcache-l2: {self.python} cannot import LMCache (lmcache.cli.main); {LMCACHE_HINT}")
        ours = Path(lmcache_resp.__file__).resolve()
        if versions.get("error") or versions.get("lmcache_resp") is None:
            raise BenchError(f"--compare lmcache-l2: {self.python} cannot import this lmcache_resp ({ours.parent}): "
                             f"{versions.get('error')}")
        if Path(str(versions["lmcache_resp"])).resolve() != ours:
            raise BenchError(f"--compare lmcache-l2: {self.python} imports lmcache_resp from {versions['lmcache_resp']}, "
                             f"not this bench's {ours}")
        return versions

    def run(self, adapter: str, spec: dict[str, Any], cell: Cell, alternation: int) -> L2Run:
        self.count += 1
        output = self.scratch / f"run-{self.count}.json"
        rounds = self.options.l2_bench_rounds
        argv = bench_argv(self.python, spec, cell, rounds, str(output))
        limit = RUN_GRACE_S + 3 * (rounds + LMCACHE_WARMUP_ROUNDS) * (ROUND_BOUND_S + cell.round_bytes / 1e8)
        run = L2Run(adapter, cell, alternation)
        started = time.monotonic()
        try:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                       env=self.env, start_new_session=True)
        except OSError as exc:
            raise BenchError(f"--compare lmcache-l2: cannot start {self.python}: {exc}") from None
        try:
            stdout, stderr = process.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            stdout, stderr = process.communicate()
            run.failure = f"did not finish within {limit:.0f} s (hung); {_diagnostics(stdout, stderr)}"
            return run
        except BaseException:
            _kill_group(process)
            process.wait()
            raise
        finally:
            run.wall_seconds = time.monotonic() - started
        doc, unreadable = None, ""
        try:
            doc = json.loads(output.read_text())
        except (OSError, ValueError) as exc:
            unreadable = f"{type(exc).__name__}: {exc}"
        finally:
            output.unlink(missing_ok=True)
        if process.returncode != 0:
            what = "verification failed" if process.returncode == 1 and b"mismatch" in stdout else "failed"
            run.failure = f"{what} (exit status {process.returncode}); {_diagnostics(stdout, stderr)}"
        elif doc is None:
            run.failure = f"no result ({unreadable}); {_diagnostics(stdout, stderr)}"
        else:
            run.p50_ms, run.failure = read_result(doc, cell, rounds)
        return run


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _diagnostics(stdout: bytes, stderr: bytes) -> str:
    """The last lines of LMCache's progress log and of its errors."""
    log = [line.strip() for line in stdout.decode(errors="replace").splitlines() if line.lstrip().startswith("[")]
    errors = [line.strip() for line in stderr.decode(errors="replace").splitlines()
              if line.strip() and " INFO:" not in line and " DEBUG:" not in line]
    said = " | ".join(log[-3:] + errors[-3:])
    return f"it said: {said[-600:]}" if said else "it said nothing"


def _lmcache_importable() -> bool:
    try:
        return importlib.util.find_spec("lmcache.cli.main") is not None
    except (ImportError, ValueError):
        return False


def run_lmcache_l2(options: Options, target: Target, console: Console) -> L2Result:
    """Every cell, depth and alternation; the result (its failures included)."""
    if not target.embedded:
        raise BenchError("--compare lmcache-l2 flushes the server between runs: it runs on throwaway servers only")
    python = peer_python(options.lmcache_python, _lmcache_importable,
                         f"--compare lmcache-l2: LMCache is not importable by {sys.executable}; {LMCACHE_HINT}")
    scratch = Path(tempfile.mkdtemp(prefix="lmcache-resp-l2-"))
    try:
        runner = _Runner(options, python, scratch)
        console.progress.start("asking LMCache's interpreter what it has")
        versions = runner.probe()
        specs: dict[str, dict[str, Any]] = {}
        skipped: dict[str, str] = {}
        for name in options.l2_adapters:
            spec, why = adapter_spec(name, target, options)
            if spec is not None and name == "valkey" and versions.get("glide") is None:
                spec, why = None, f"valkey-glide-sync is not installed for {python} (pip install valkey-glide-sync)"
            if spec is None:
                skipped[name] = why
            else:
                specs[name] = spec
        if not specs:
            raise BenchError("--compare lmcache-l2: none of the adapters asked for can run here: "
                             + "; ".join(f"{k}: {v}" for k, v in skipped.items()))
        result = L2Result(options, target, python, versions, specs, skipped)
        for line in result.preamble():
            console.say(line)
        _run_all(result, runner, console)
        return result
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run_all(result: L2Result, runner: _Runner, console: Console) -> None:
    options, adapters = result.options, list(result.specs)
    keep = options.keeps_freed_memory
    per_cell = options.rounds * len(adapters) + (1 if keep else 0)
    console.progress.add_total(per_cell * len(result.cells))
    result.rss_baseline = server_rss(result.target) if keep else 0
    for cell in result.cells:
        plan = [(WARMUP, adapters[0])] if keep else []
        plan += [(alt, name) for alt in range(options.rounds) for name in alternation_order(adapters, alt)]
        for alternation, name in plan:
            step = "untimed run" if alternation == WARMUP else f"alternation {alternation + 1}/{options.rounds}"
            console.progress.start(f"{cell.label}, {step}: {name}")
            flush(result.target, keep_memory=keep)
            if keep and alternation != WARMUP and _purge_if_bloated(result, cell, console):
                # The purge handed the memory back: one untimed run makes it the server's again.
                console.progress.add_total(1)
                _run_one(result, runner, console, name, cell, WARMUP, "untimed run after the purge")
                flush(result.target, keep_memory=keep)
            _run_one(result, runner, console, name, cell, alternation, step)


def _run_one(result: L2Result, runner: _Runner, console: Console, name: str, cell: Cell, alternation: int,
             step: str) -> None:
    run = runner.run(name, result.specs[name], cell, alternation)
    result.runs.append(run)
    if run.failure is not None:
        console.warn(f"{name}, {cell.label}, {step}: FAILED: {run.failure}")
    console.progress.advance()


def _purge_if_bloated(result: L2Result, cell: Cell, console: Console) -> bool:
    """Purges a steady server that holds more than steady_rss_limit after a flush (restarts it
    where MEMORY PURGE cannot shrink it); whether it did."""
    limit = steady_rss_limit(result.rss_baseline, cell, result.options.l2_bench_rounds)
    rss = server_rss(result.target)
    if rss <= limit:
        return False
    purge(result.target)
    after = _settled_rss(result.target, limit)
    restarted = False
    if after > limit and result.target.restart is not None:
        # An allocator the server was not built with (jemalloc preloaded into a libc-malloc
        # Valkey) is out of MEMORY PURGE's reach; the server is empty anyway: start it again.
        result.target.restart()
        after, restarted = _settled_rss(result.target, limit), True
    result.purges.append(Purge(cell, rss, limit, after, restarted))
    how = "restarted it on its port (MEMORY PURGE could not shrink it)" if restarted else "purged"
    console.say(f"  {cell.label}: the flushed server still held {format_size(rss)} (over {format_size(limit)}, "
                f"its size at start plus two runs' data); {how}: {format_size(after)}, re-warmed with one untimed run")
    if after > limit:
        # Neither purge nor restart shrank it (a cluster's nodes are not restarted): go on while
        # the machine has room.
        total = meminfo_bytes("MemTotal")
        if total is not None and after > total // 2:
            raise BenchError(f"the throwaway server holds {format_size(after)} even after MEMORY PURGE, over half "
                             f"of this machine's memory: its allocator does not hand memory back "
                             "(jemalloc preloaded into a server built without it), and more runs would only add to "
                             "it; measure this server with --regime fresh")
        console.warn(f"{cell.label}: the purge left the server at {format_size(after)}, over {format_size(limit)}: "
                     "its allocator does not hand memory back; the steady runs go on while it fits in memory")
        result.rss_baseline = after
    return True


def _settled_rss(target: Target, limit: int) -> int:
    """The server's memory once it is under ``limit``, or after PURGE_SETTLE_S: INFO's
    used_memory_rss is refreshed by the server's cron (10 times a second by default)."""
    deadline = time.monotonic() + PURGE_SETTLE_S
    while (rss := server_rss(target)) > limit and time.monotonic() < deadline:
        time.sleep(0.05)
    return rss

