"""--vllm-tier: vLLM-shaped rows through vLLM's secondary-tier path, ours beside vLLM's own.

Rows as vLLM's CPU primary tier keeps them for a Llama-3.1-8B-like model: 16-token blocks of 32
layers x 8 KV heads x 128 x K,V in bf16 (2 MiB a block), ``--vllm-blocks`` blocks a chunk (one
row; default 1). vLLM's own ``TieringOffloadingSpec`` builds the primary (its
``SharedOffloadRegion`` in /dev/shm, twice ``--vllm-rows`` rows, pre-faulted) and both secondary
tiers through its ``SecondaryTierFactory``. Each round stores ``--vllm-rows`` rows from one half
of the primary in one job (``submit_store``) and loads them into the other half in one job
(``submit_load``), every byte compared, for each contender in turn, the order reversed every
other round (ABBA); fresh keys each round, deleted after it. One untimed round first.

- ``resp``: ours, ``lmcache_resp.vllm.RespSecondaryTierManager`` (``module_path``).
- ``fs``: vLLM's own ``FileSystemTierManager`` with its ``root_dir`` on tmpfs (/dev/shm) and its
  default 16 read and 16 write threads (tmpfs refuses O_DIRECT: it falls back to buffered I/O).
- ``paged``: our ``PagedRespStore`` on the same server moving the same values (one per row) from
  and into its own arena pages: the yardstick (``resp`` should move rows at 90% or more of it).

A job is timed from its submission to the ``get_finished_jobs`` call that returns it, polled
every 1 ms (vLLM's tier-poll interval; its manager polls once per scheduler step); its GB/s is the job's bytes over
that time. Needs vLLM (and torch) in this Python: run it with scripts/test-vllm-tier.sh's venvs.
"""

from __future__ import annotations

import importlib
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from lmcache_resp import PagedRespStore, RespError, RespSettings
from lmcache_resp.bench.console import Console, GiB, MiB, table_lines
from lmcache_resp.bench.errors import BenchError
from lmcache_resp.bench.options import Options
from lmcache_resp.bench.target import open_target

__all__ = ["BLOCK_BYTES", "CONTENDERS", "run_vllm_tier"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
BLOCK_TOKENS, LAYERS, KV_HEADS, HEAD_DIM = 16, 32, 8, 128
#: One block of the model above: K and V of every layer, bf16.
BLOCK_BYTES = 2 * LAYERS * BLOCK_TOKENS * KV_HEADS * HEAD_DIM * 2
CONTENDERS = ("resp", "fs", "paged")
TMPFS = "/dev/shm"
POLL_S = 0.001  # vLLM's tier-poll interval (DEFAULT_TIER_POLL_INTERVAL_S); its steps poll less often
JOB_TIMEOUT_S = 120.0


@dataclass
class Tally:
    """One contender's timed jobs."""

    name: str
    store_s: list[float] = field(default_factory=list)
    load_s: list[float] = field(default_factory=list)

    def gbps(self, times: list[float], nbytes: int) -> float:
        return nbytes / statistics.median(times) / 1e9


def run_vllm_tier(options: Options, *, stdout: TextIO, stderr: TextIO) -> int:
    console = Console(stdout, stderr, json_mode=False)
    try:  # checked here: the message says what to run instead
        _module("torch")
        _module("vllm.v1.kv_offload.tiering.spec")
    except ImportError as exc:
        console.warn(f"error: --vllm-tier needs vLLM and torch in this Python ({exc}): run it with "
                     "scripts/test-vllm-tier.sh's venv (target/vllm-tier/venv-torch2.14.0/bin/python, with "
                     "target/vllm-tier/vllm-0.34.0 on PYTHONPATH)")
        return EXIT_USAGE
    try:
        with open_target(options, console, f"lmcache-resp-bench:{uuid.uuid4()}:") as target:
            console.say(target.header_line())
            bench = _Bench(options, target.settings, console)
            try:
                tallies = bench.run()
            finally:
                bench.close()
    except BenchError as exc:
        console.warn(f"error: {exc}")
        return EXIT_USAGE
    except (RespError, _Mismatch) as exc:
        console.warn(f"error: the run failed: {type(exc).__name__}: {exc}")
        return EXIT_FAILED
    except KeyboardInterrupt:
        console.warn("interrupted")
        return EXIT_INTERRUPTED
    for line in _report(tallies, bench.job_bytes, options):
        console.say(line)
    console.say("All rows verified byte for byte")
    return EXIT_OK


class _Mismatch(Exception):
    pass


class _Bench:
    def __init__(self, options: Options, settings: Any, console: Console) -> None:
        import numpy as np

        config = _module("vllm.v1.kv_offload.config")
        TieringOffloadingSpec = _module("vllm.v1.kv_offload.tiering.spec").TieringOffloadingSpec

        self.options, self.console, self.settings = options, console, settings
        self.rows = options.vllm_rows
        self.tmp = tempfile.mkdtemp(prefix="lmcache-resp-vllm-fs-", dir=TMPFS if os.path.isdir(TMPFS) else None)
        resp = {"type": "RespSecondaryTierManager", "module_path": "lmcache_resp.vllm", "host": settings.host,
                "port": settings.port, "num_workers": options.num_workers, "timeout": options.timeout}
        layers = tuple(f"model.layers.{i}.self_attn.attn" for i in range(LAYERS))
        blocks = options.vllm_blocks
        self.spec = TieringOffloadingSpec(config.OffloadingConfig(
            groups=(config.OffloadingGroupConfig(tokens_per_block=BLOCK_TOKENS, layer_names=layers, group_id=0),),
            worker_kv_bytes_per_block=BLOCK_BYTES, enable_kv_cache_events=False,
            extra_config={"cpu_bytes_to_use": 2 * self.rows * blocks * BLOCK_BYTES,
                          "secondary_tiers": [resp, {"type": "fs", "root_dir": self.tmp}]},
            engine_id=f"lmcache_resp_bench_{uuid.uuid4().hex[:12]}",
            model=config.OffloadingModelConfig(name="meta-llama/Llama-3.1-8B-Instruct", dtype="bfloat16"),
            cache=config.OffloadingCacheConfig(tokens_per_hash=BLOCK_TOKENS, blocks_per_chunk=blocks),
            parallel=config.OffloadingParallelConfig(
                rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1, data_parallel_index=0,
                data_parallel_size=1, data_parallel_rank_local=None, is_parallelism_agnostic=False),
        ))
        self.manager = self.spec.get_manager()
        self.tiers = {"resp": self.manager.secondary_tiers[0], "fs": self.manager.secondary_tiers[1]}
        view = self.manager.primary_tier.get_kv_memoryview()
        self.row_bytes = int(view.shape[1])
        if view.shape[0] < 2 * self.rows:
            raise BenchError(f"vLLM made a primary of {view.shape[0]} rows, fewer than the {2 * self.rows} needed")
        self.primary: Any = np.frombuffer(view, dtype=np.int8).reshape(view.shape)
        rng = np.random.default_rng(options.seed)
        self.primary[: self.rows] = rng.integers(-128, 128, size=(self.rows, self.row_bytes), dtype=np.int8)
        self.job_bytes = self.rows * self.row_bytes
        self.src = np.arange(self.rows, dtype=np.int64)
        self.dst = np.arange(self.rows, 2 * self.rows, dtype=np.int64)
        self.paged = PagedRespStore(settings=self._settings(), page_size=self.row_bytes, num_pages=2 * self.rows)
        self._jobs = 0
        console.say(
            f"vLLM {self.tiers['resp']._api.version}: primary of {view.shape[0]} rows of {self.row_bytes / MiB:g} MiB "
            f"({blocks} block(s) of {BLOCK_TOKENS} tokens x {LAYERS} layers x {KV_HEADS} KV heads x {HEAD_DIM}, bf16) "
            f"in /dev/shm; {self.rows} rows a job ({self.job_bytes / GiB:.2f} GiB); vLLM's fs tier in {self.tmp}"
        )

    def _settings(self) -> RespSettings:
        return RespSettings.resolve(host=self.settings.host, port=self.settings.port, username="", password="",
                                    num_workers=self.options.num_workers, timeout=self.options.timeout)

    def close(self) -> None:
        self.paged.close()
        self.primary = None
        self.manager.shutdown()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- rounds ---------------------------------------------------------------------------------

    def run(self) -> dict[str, Tally]:
        tallies = {name: Tally(name) for name in CONTENDERS}
        rounds = self.options.rounds
        for r in range(rounds + 1):
            order = CONTENDERS if r % 2 == 0 else tuple(reversed(CONTENDERS))
            for name in order:
                store_s, load_s = self._round(name)
                if r > 0:  # round 0 is the untimed warm-up
                    tallies[name].store_s.append(store_s)
                    tallies[name].load_s.append(load_s)
            if r > 0:
                self.console.say(f"round {r}/{rounds}: " + ", ".join(
                    f"{n} store {self.job_bytes / tallies[n].store_s[-1] / 1e9:.2f} load "
                    f"{self.job_bytes / tallies[n].load_s[-1] / 1e9:.2f} GB/s" for n in CONTENDERS))
        return tallies

    def _round(self, name: str) -> tuple[float, float]:
        keys = _keys(self.rows)
        if name == "paged":
            return self._paged_round(keys)
        return self._tier_round(self.tiers[name], keys)

    def _tier_round(self, tier: Any, keys: list[bytes]) -> tuple[float, float]:
        """One store job and one load job through ``tier``, then every byte compared."""
        import numpy as np

        self.primary[self.rows :] = 0
        store_s = self._job(tier, keys, self.src, promotion=False)
        load_s = self._job(tier, keys, self.dst, promotion=True)
        if not np.array_equal(self.primary[self.src], self.primary[self.dst]):
            raise _Mismatch(f"{type(tier).__name__}: a row loaded back differs from the row stored")
        self._forget(tier, keys)
        return store_s, load_s

    def _job(self, tier: Any, keys: list[bytes], rows: Any, *, promotion: bool) -> float:
        """Submits one job and polls for it as vLLM's manager does; its time."""
        base = _module("vllm.v1.kv_offload.tiering.base")
        ReqContext = _module("vllm.v1.kv_offload.base").ReqContext
        self._jobs += 1
        job = base.TransferJob(job_id=self._jobs, keys=keys, chunk_ids=rows.astype("int32"),
                               is_promotion=promotion, req_context=ReqContext(req_id="bench"))
        start = time.perf_counter()
        (tier.submit_load if promotion else tier.submit_store)(job)
        while True:
            done = [r for r in tier.get_finished_jobs() if r.job_id == job.job_id]
            if done:
                elapsed = time.perf_counter() - start
                break
            if time.perf_counter() - start > JOB_TIMEOUT_S:
                raise _Mismatch(f"{type(tier).__name__}: a job of {len(keys)} rows did not finish in {JOB_TIMEOUT_S:g} s")
            time.sleep(POLL_S)
        if not done[0].success:
            raise _Mismatch(f"{type(tier).__name__}: a {'load' if promotion else 'store'} job failed")
        return elapsed

    def _paged_round(self, keys: list[bytes]) -> tuple[float, float]:
        """The same bytes from and into the store's own arena pages, one value per row."""
        import numpy as np

        names = [k.hex() for k in keys]
        src = self.paged.allocate_many(self.rows)
        dst = self.paged.allocate_many(self.rows)
        try:
            for i, page in enumerate(src):
                page.numpy()[:] = self.primary[i].view(np.uint8)
            for page in dst:
                page.numpy()[:] = 0
            store_s, _ = _timed(lambda: self.paged.put(names, src))
            load_s, hits = _timed(lambda: self.paged.get(names, dst))
            if not all(hits):
                raise _Mismatch(f"PagedRespStore: {hits.count(False)} misses")
            for a, b in zip(src, dst):
                if not np.array_equal(a.numpy(), b.numpy()):
                    raise _Mismatch("PagedRespStore: a value read back differs")
            self.paged.delete(names)
        finally:
            for page in (*src, *dst):
                self.paged.free(page)
        return store_s, load_s

    def _forget(self, tier: Any, keys: list[bytes]) -> None:
        if tier is self.tiers["resp"]:
            self.paged.delete([tier.key_of(k) for k in keys])
        else:
            for key in keys:
                os.remove(tier.file_mapper.get_file_name(key))


def _module(name: str) -> Any:
    """vLLM's and torch's modules, imported when used (the package does not depend on them)."""
    return importlib.import_module(name)


def _keys(n: int) -> list[bytes]:
    """vLLM's ``OffloadKey``s: a 32-byte block hash and the 4-byte group index."""
    return [os.urandom(32) + (0).to_bytes(4, "big") for _ in range(n)]


def _timed(call: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def _report(tallies: dict[str, Tally], job_bytes: int, options: Options) -> list[str]:
    rows = [["", "store GB/s", "load GB/s", "store job p50 ms", "load job p50 ms"]]
    for t in tallies.values():
        rows.append([t.name, f"{t.gbps(t.store_s, job_bytes):.2f}", f"{t.gbps(t.load_s, job_bytes):.2f}",
                     f"{statistics.median(t.store_s) * 1e3:.1f}", f"{statistics.median(t.load_s) * 1e3:.1f}"])
    resp = tallies["resp"]
    lines = ["", f"vLLM-shaped rows, medians of {options.rounds} rounds (ABBA), {job_bytes / GiB:.2f} GiB a job:"]
    lines += table_lines(rows, numbers_right=True)
    for other in ("paged", "fs"):
        t = tallies[other]
        lines.append(
            f"resp / {other}: store {statistics.median(t.store_s) / statistics.median(resp.store_s):.2f}x, "
            f"load {statistics.median(t.load_s) / statistics.median(resp.load_s):.2f}x"
        )
    return lines
