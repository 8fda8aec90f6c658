"""lmcache_resp's PagedRespStore as a benchmark client: one batch of all keys per call."""

from __future__ import annotations

import inspect
from collections.abc import Sequence

from lmcache_resp import __version__
from lmcache_resp.errors import InvalidInputError, RespConnectionError
from lmcache_resp.store import PagedRespStore
from lmcache_resp.bench import pattern
from lmcache_resp.bench.errors import BenchError, Mismatch, VerificationError
from lmcache_resp.bench.samples import OpSample, timed
from lmcache_resp.bench.target import Target
from lmcache_resp.bench.workload import Workload, apply_test_corruption, round_label

__all__ = ["NAME", "OursDriver", "store_accepts_cpu_affinity"]

NAME = "lmcache_resp"


def store_accepts_cpu_affinity() -> bool:
    return "cpu_affinity" in inspect.signature(PagedRespStore.__init__).parameters


class OursDriver:
    name = NAME

    def __init__(self, target: Target, workload: Workload, *, num_workers: int, cpu_affinity: str | None = None) -> None:
        kwargs = target.connect_kwargs()
        if cpu_affinity is not None:
            # Passed only when asked for, so runs without it work with any build.
            if not store_accepts_cpu_affinity():
                raise BenchError(
                    "--cpu-affinity: this lmcache_resp build's PagedRespStore does not accept cpu_affinity yet; "
                    "update and rebuild lmcache_resp, or run without --cpu-affinity"
                )
            kwargs["cpu_affinity"] = cpu_affinity
        self.workload = workload
        self.num_workers = num_workers
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
        return f"lmcache_resp {__version__}, PagedRespStore, {self.num_workers} I/O workers, one batch per op"

    def supports(self, op: str) -> bool:
        return True

    def run_round(self, round_index: int, ops: Sequence[str]) -> dict[str, OpSample]:
        keys, pages, w = self.workload.keys, self.pages, self.workload
        n, nbytes = len(keys), w.batch_bytes
        w.fill(self.buffers, round_index)
        samples: dict[str, OpSample] = {}
        samples["set"], _ = timed("set", n, nbytes, lambda: self.store.put(keys, pages))
        if "get" in ops:
            w.poison(self.buffers)
            samples["get"], hit = timed("get", n, nbytes, lambda: self.store.get(keys, pages))
            apply_test_corruption(self.buffers)
            read = [b if h else None for b, h in zip(self.buffers, hit)]
            mismatches = w.verify(self.name, round_index, read)
            if mismatches:
                raise VerificationError(mismatches)
        if "exists" in ops:
            repeat = w.exists_repeat
            samples["exists"], answers = timed(
                "exists", n * repeat, 0, lambda: [self.store.exists(keys) for _ in range(repeat)]
            )
            for found in answers:
                _require_all(found, "EXISTS", self.name, round_index, keys)
        sample, deleted = timed("delete", n, 0, lambda: self.store.delete(keys))
        _require_all(deleted, "DELETE", self.name, round_index, keys)
        if "delete" in ops:
            samples["delete"] = sample
        return {op: samples[op] for op in ops if op in samples}

    def close(self) -> None:
        self.store.close()


def _require_all(flags: Sequence[bool], op: str, client: str, round_index: int, keys: Sequence[str]) -> None:
    """EXISTS and DELETE must find every key just written (else: eviction, or a client bug)."""
    mismatches = [
        Mismatch(client, round_label(round_index), key, f"{op} did not find the key just written (maxmemory eviction?)")
        for key, found in zip(keys, flags) if not found
    ]
    if mismatches:
        raise VerificationError(mismatches)
