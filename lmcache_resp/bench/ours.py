"""lmcache_resp's PagedRespStore as a benchmark client: one batch of all keys per call, and the
latency pass (single-key batches timed one by one: what one lookup costs, not a batch)."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from lmcache_resp import PagedRespStore, __version__
from lmcache_resp.errors import InvalidInputError, RespConnectionError
from lmcache_resp.bench import pattern
from lmcache_resp_servers.replication import REPLICA_WAIT_S
from lmcache_resp.bench.errors import BenchError
from lmcache_resp.bench.options import ALL_OPS, shape_text
from lmcache_resp.bench.measure import OpSample, timed
from lmcache_resp.bench.target import Target
from lmcache_resp.bench.workload import Mismatch, VerificationError, Workload, round_label

__all__ = ["LatencyStats", "OursDriver", "store_accepts_cpu_affinity"]

LATENCY_KEYS = 200
# What a miss after the SET may mean when the replicas did not catch up in the settle step.
REPLICA_LAG = (
    "the replicas that reads go to had not caught up with their primaries when the GET started, "
    f"after waiting {REPLICA_WAIT_S:g} s: replication lag or a stalled replica, not necessarily a lost value; "
    "see each replica's INFO replication, or run with --read-from primary"
)


def store_accepts_cpu_affinity() -> bool:
    return "cpu_affinity" in inspect.signature(PagedRespStore.__init__).parameters


@dataclass(frozen=True)
class LatencyStats:
    op: str
    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float

    @classmethod
    def of(cls, op: str, seconds: Sequence[float]) -> LatencyStats:
        ms = np.asarray(seconds) * 1e3
        return cls(op, len(ms), float(np.percentile(ms, 50)), float(np.percentile(ms, 99)), float(ms.max()))


class OursDriver:
    name = "lmcache_resp"
    supported_ops = ALL_OPS

    def __init__(
        self,
        target: Target,
        workload: Workload,
        *,
        num_workers: int,
        cpu_affinity: str | None = None,
        get_piece_bytes: int | None = None,
        connections_per_worker: int | None = None,
    ) -> None:
        self.settle = target.settle
        kwargs = target.connect_kwargs()
        if cpu_affinity is not None:
            # Passed only when asked for, so runs without it work with any build.
            if not store_accepts_cpu_affinity():
                raise BenchError(
                    "--cpu-affinity: this lmcache_resp build's PagedRespStore does not accept cpu_affinity yet; "
                    "update and rebuild lmcache_resp, or run without --cpu-affinity"
                )
            kwargs["cpu_affinity"] = cpu_affinity
        if get_piece_bytes is not None:
            kwargs["get_piece_bytes"] = get_piece_bytes
        if connections_per_worker is not None:
            kwargs["connections_per_worker"] = connections_per_worker
        self.workload = workload
        self.num_workers = num_workers
        self.connections_per_worker = connections_per_worker
        try:
            self.store = PagedRespStore(page_size=workload.chunk_bytes, num_pages=len(workload.keys), num_workers=num_workers, **kwargs)
        # Unreachable server, wrong credentials, a setting this machine cannot honour: the
        # user's to fix (exit 2), not a failure of the run.
        except RespConnectionError as exc:
            raise BenchError(f"cannot use the server at {target.endpoint}: {exc}") from None
        except InvalidInputError as exc:
            raise BenchError(f"lmcache_resp refused the settings: {exc}") from None
        self.pages = self.store.allocate_many(len(workload.keys))
        # Writable views of the pages (no copy): what the workload fills and verifies.
        self.buffers: list[pattern.Bytes] = [page.numpy() for page in self.pages]

    def describe(self) -> str:
        return (f"lmcache_resp {__version__}, PagedRespStore, {shape_text(self.num_workers, self.connections_per_worker)}, "
                f"one batch per op, "
                f"large values read as {self.reads()}")

    def reads(self) -> str:
        """How large values are read from each server (get_piece_bytes, decided per server for
        "auto"), as stats() reports it: ``whole GETs (valkey 9.1.2)``, grouped over servers."""
        shapes: dict[str, list[str]] = {}
        for name, endpoint in self.store.stats().endpoints.items():
            if endpoint.reads:
                said = f" ({endpoint.server})" if endpoint.server else ""
                shapes.setdefault(f"{endpoint.reads}{said}", []).append(name)
        if len(shapes) <= 1:
            return next(iter(shapes), "unknown")
        return "; ".join(f"{shape} from {', '.join(names)}" for shape, names in shapes.items())

    def _settle(self) -> str:
        """Untimed, between a SET and its GET: waits until the replicas that reads go to caught up
        (replication is asynchronous). What a miss may then mean besides a lost value: "" when
        they caught up (or reads go to primaries)."""
        if self.settle is None or self.settle():
            return ""
        return REPLICA_LAG

    def run_round(self, round_index: int, ops: Sequence[str]) -> dict[str, OpSample]:
        keys, pages, w = self.workload.keys, self.pages, self.workload
        n, nbytes = len(keys), w.batch_bytes
        w.fill(self.buffers, round_index)
        samples: dict[str, OpSample] = {}
        samples["set"], _ = timed("set", n, nbytes, lambda: self.store.put(keys, pages))
        miss_note = self._settle()
        if "get" in ops:
            w.poison(self.buffers)
            samples["get"], hits = timed("get", n, nbytes, lambda: self.store.get(keys, pages))
            w.check(self.name, round_index, self.buffers, hits, miss_note)
        if "exists" in ops:
            repeat = w.exists_repeat
            samples["exists"], answers = timed(
                "exists", n * repeat, 0, lambda: [self.store.exists(keys) for _ in range(repeat)]
            )
            for found in answers:
                _require_all(found, "EXISTS", self.name, round_index, keys)
        samples["delete"], deleted = timed("delete", n, 0, lambda: self.store.delete(keys))
        _require_all(deleted, "DELETE", self.name, round_index, keys)
        return samples

    def measure_latency(self, ops: Sequence[str]) -> dict[str, LatencyStats]:
        """SET then GET (then EXISTS, DELETE when asked) of min(num_keys, 200) keys, one key per
        batch; every GET is verified like the throughput rounds."""
        store, w = self.store, self.workload
        n = min(len(w.keys), LATENCY_KEYS)
        keys, pages, buffers = w.keys[:n], self.pages[:n], self.buffers[:n]
        for i, buffer in enumerate(buffers):
            pattern.fill(buffer, w.seed, pattern.LATENCY_ROUND, i)
        stats = {"set": LatencyStats.of("set", _each(n, lambda i: store.put([keys[i]], [pages[i]])))}
        miss_note = self._settle()
        if "get" in ops:
            w.poison(buffers)
            hits: list[bool] = []
            stats["get"] = LatencyStats.of("get", _each(n, lambda i: hits.extend(store.get([keys[i]], [pages[i]]))))
            w.check(self.name, pattern.LATENCY_ROUND, buffers, hits, miss_note)
        if "exists" in ops:
            stats["exists"] = LatencyStats.of("exists", _each(n, lambda i: store.exists([keys[i]])))
        deletes = _each(n, lambda i: store.delete([keys[i]]))
        if "delete" in ops:
            stats["delete"] = LatencyStats.of("delete", deletes)
        return stats

    def close(self) -> None:
        self.store.close()


def _each(count: int, call: Callable[[int], object]) -> list[float]:
    """Seconds of ``call(i)`` for each i, timed one by one."""
    times = []
    for i in range(count):
        started = time.perf_counter()
        call(i)
        times.append(time.perf_counter() - started)
    return times


def _require_all(flags: Sequence[bool], op: str, client: str, round_index: int, keys: Sequence[str]) -> None:
    """EXISTS and DELETE must find every key just written (else: eviction, or a client bug)."""
    mismatches = [
        Mismatch(client, round_label(round_index), key, f"{op} did not find the key just written (maxmemory eviction?)")
        for key, found in zip(keys, flags) if not found
    ]
    if mismatches:
        raise VerificationError(mismatches)
