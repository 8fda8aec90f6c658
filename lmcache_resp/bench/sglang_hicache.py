"""--sglang: SGLang-shaped pages through SGLang HiCache's storage path, ours beside the peers.

Pages as SGLang keeps them for a Llama-3.1-8B-like model: 64 tokens, 32 layers, 8 KV heads of
128, bf16, in SGLang's own host pool (``MHATokenToKVPoolHost``, ``--sglang-layout``, page_first by
default: 8 MiB a page, K and V 4 MiB each). Each round stores ``--sglang-pages`` pages from one
half of the pool and reads them back into the other half, every byte compared, for each
contender in turn, the order reversed every other round (ABBA); fresh keys each round, deleted
after it. One untimed round first.

- ``resp``: ours, ``lmcache_resp.sglang.RespHiCacheStorage``, built by SGLang's ``dynamic`` loader
  and driven by its cache controller's zero-copy methods (``_page_set_zero_copy``: EXISTS then
  SET of what is missing; ``_page_get_zero_copy``).
- ``file``: SGLang's own ``HiCacheFile`` backend on tmpfs (/dev/shm), the nearest peer that ships
  with SGLang, driven by the controller's ``_generic_page_set``/``_generic_page_get`` (what it
  uses for ``file``: a flat copy of each page, then a file per page).
- ``paged``: our ``PagedRespStore`` on the same server moving the same values: one 4 MiB value per
  segment (``paged-seg``, what ``resp`` sends) and one 8 MiB value per page (``paged-page``), from
  and into its own arena pages. The yardstick: ``resp`` should move pages at 90% or more of it.

No Redis-based HiCache backend is published on PyPI to compare with (docs/sglang.md says what
was searched). Needs SGLang (and torch) in this Python: run it with scripts/test-sglang.sh's venv.
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
from types import SimpleNamespace
from typing import Any, TextIO

from lmcache_resp import PagedRespStore, RespError, RespSettings
from lmcache_resp.bench.console import Console, GiB, MiB, table_lines
from lmcache_resp.bench.errors import BenchError
from lmcache_resp.bench.options import Options
from lmcache_resp.bench.target import open_target

__all__ = ["CONTENDERS", "run_sglang"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
PAGE_TOKENS, LAYERS, KV_HEADS, HEAD_DIM = 64, 32, 8, 128
CONTENDERS = ("resp", "file", "paged-seg", "paged-page")
TMPFS = "/dev/shm"


@dataclass
class Tally:
    """One contender's timed batches."""

    name: str
    set_s: list[float] = field(default_factory=list)
    get_s: list[float] = field(default_factory=list)

    def gbps(self, times: list[float], nbytes: int) -> float:
        return nbytes / statistics.median(times) / 1e9


def run_sglang(options: Options, *, stdout: TextIO, stderr: TextIO) -> int:
    console = Console(stdout, stderr, json_mode=False)
    try:  # checked here: the message says what to run instead
        _module("torch")
        _module("sglang.srt.mem_cache.storage.backend_factory")
    except ImportError as exc:
        console.warn(f"error: --sglang needs SGLang and torch in this Python ({exc}): run it with "
                     "scripts/test-sglang.sh's venv (target/sglang-0.5.23/venv/bin/python -m lmcache_resp.bench --sglang)")
        return EXIT_USAGE
    try:
        with open_target(options, console, f"lmcache-resp-bench:{uuid.uuid4()}:") as target:
            console.say(target.header_line())
            console.say(target.io_loop_line())
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
    for line in _report(tallies, bench.batch_bytes, options):
        console.say(line)
    console.say("All pages verified byte for byte")
    return EXIT_OK


class _Mismatch(Exception):
    pass


class _Bench:
    def __init__(self, options: Options, settings: Any, console: Console) -> None:
        torch = _module("torch")
        _mha_host_inputs = _module("sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler")._mha_host_inputs
        MHATokenToKVPool = _module("sglang.srt.mem_cache.memory_pool").MHATokenToKVPool

        self.options, self.console = options, console
        self.pages = options.sglang_pages
        self.settings = settings
        device = MHATokenToKVPool(size=self.pages * PAGE_TOKENS, page_size=PAGE_TOKENS, dtype=torch.bfloat16,
                                  head_num=KV_HEADS, head_dim=HEAD_DIM, layer_num=LAYERS, device="cpu",
                                  enable_memory_saver=False)
        cls, info, kwargs = _mha_host_inputs(device)
        # Twice the device pool: the pages stored, and as many to read them back into.
        self.pool = cls(info, 2.0, 0, PAGE_TOKENS, options.sglang_layout, pin_memory=False, device="cpu", **kwargs)
        del device
        raw = self.pool.kv_buffer.view(-1).view(torch.int16)
        raw.copy_(torch.randint(-(1 << 15), 1 << 15, raw.shape, dtype=torch.int16,
                                generator=torch.Generator().manual_seed(options.seed)))
        self.page_bytes = 2 * LAYERS * PAGE_TOKENS * KV_HEADS * HEAD_DIM * 2
        self.batch_bytes = self.pages * self.page_bytes
        self.src = list(range(self.pages))
        self.dst = list(range(self.pages, 2 * self.pages))
        self.tmp = tempfile.mkdtemp(prefix="lmcache-resp-hicache-file-", dir=TMPFS if os.path.isdir(TMPFS) else None)
        self.resp = self._resp_backend()
        self.file = self._file_backend()
        self.paged = {
            "paged-seg": PagedRespStore(settings=self._settings(), page_size=self.page_bytes // 2,
                                        num_pages=4 * self.pages),
            "paged-page": PagedRespStore(settings=self._settings(), page_size=self.page_bytes, num_pages=2 * self.pages),
        }
        console.say(
            f"SGLang host pool: {type(self.pool).__name__}, layout {options.sglang_layout}, {self.pool.size // PAGE_TOKENS} "
            f"pages of {PAGE_TOKENS} tokens x {LAYERS} layers x {KV_HEADS} KV heads x {HEAD_DIM}, bf16 "
            f"({self.page_bytes / MiB:g} MiB a page); {self.pages} pages a batch ({self.batch_bytes / GiB:.2f} GiB); "
            f"HiCacheFile in {self.tmp}"
        )

    def _settings(self) -> RespSettings:
        return RespSettings.resolve(host=self.settings.host, port=self.settings.port, username="", password="",
                                    num_workers=self.options.num_workers, timeout=self.options.timeout)

    def _config(self, extra: dict[str, Any]) -> Any:
        return _module("sglang.srt.mem_cache.hicache_storage").HiCacheStorageConfig(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
                                    is_mla_model=False, enable_storage_metrics=False,
                                    is_page_first_layout=self.options.sglang_layout != "layer_first",
                                    model_name="meta-llama/Llama-3.1-8B-Instruct", extra_config=extra)

    def _resp_backend(self) -> Any:
        factory = _module("sglang.srt.mem_cache.storage.backend_factory").StorageBackendFactory
        extra = {"backend_name": "resp", "module_path": "lmcache_resp.sglang", "class_name": "RespHiCacheStorage",
                 "interface_v1": 1, "host": self.settings.host, "port": self.settings.port,
                 "num_workers": self.options.num_workers, "timeout": self.options.timeout}
        store = factory.create_backend("dynamic", self._config(extra), self.pool)
        store.register_mem_pool_host(self.pool)
        return store

    def _file_backend(self) -> Any:
        factory = _module("sglang.srt.mem_cache.storage.backend_factory").StorageBackendFactory
        store = factory.create_backend("file", self._config({"file_storage_path": self.tmp}), self.pool)
        store.register_mem_pool_host(self.pool)
        return store

    def close(self) -> None:
        self.resp.close()
        for store in self.paged.values():
            store.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- rounds ---------------------------------------------------------------------------------

    def run(self) -> dict[str, Tally]:
        tallies = {name: Tally(name) for name in CONTENDERS}
        rounds = self.options.rounds
        for r in range(rounds + 1):
            order = CONTENDERS if r % 2 == 0 else tuple(reversed(CONTENDERS))
            for name in order:
                set_s, get_s = self._round(name, r)
                if r > 0:  # round 0 is the untimed warm-up
                    tallies[name].set_s.append(set_s)
                    tallies[name].get_s.append(get_s)
            if r > 0:
                self.console.say(f"round {r}/{rounds}: " + ", ".join(
                    f"{n} set {self.batch_bytes / tallies[n].set_s[-1] / 1e9:.2f} get "
                    f"{self.batch_bytes / tallies[n].get_s[-1] / 1e9:.2f} GB/s" for n in CONTENDERS))
        return tallies

    def _round(self, name: str, r: int) -> tuple[float, float]:
        keys = [f"{uuid.uuid4().hex}{i:04x}" for i in range(self.pages)]
        if name == "resp":
            return self._controller_round(self.resp, keys, zero_copy=True)
        if name == "file":
            return self._controller_round(self.file, keys, zero_copy=False)
        return self._paged_round(self.paged[name], keys, whole_pages=name == "paged-page")

    def _controller_round(self, store: Any, keys: list[str], *, zero_copy: bool) -> tuple[float, float]:
        """SGLang's controller moving the pages through ``store``, then every byte compared."""
        torch = _module("torch")
        HiCacheController = _module("sglang.srt.managers.cache_controller").HiCacheController
        ctrl = SimpleNamespace(storage_backend=store, storage_host_pool=self.pool, mem_pool_host=self.pool,
                               page_size=PAGE_TOKENS)
        operation = SimpleNamespace(request_id="bench", is_terminated=lambda: False)
        src, dst = _slots(self.src), _slots(self.dst)
        self._clear_dst()
        if zero_copy:
            set_s, stored = _timed(lambda: HiCacheController._page_set_zero_copy(ctrl, keys, src))
            get_s, loaded = _timed(lambda: HiCacheController._page_get_zero_copy(ctrl, operation, keys, dst))
        else:
            set_s, stored = _timed(lambda: HiCacheController._generic_page_set(ctrl, keys, src))
            get_s, loaded = _timed(lambda: HiCacheController._generic_page_get(ctrl, operation, keys, dst))
        if stored is not True or loaded != self.pages:
            raise _Mismatch(f"{type(store).__name__}: stored {stored}, loaded {loaded} of {self.pages} pages")
        for s, d in zip(self.src, self.dst):
            a = self.pool.get_data_page(s * PAGE_TOKENS, flat=True).view(torch.int16)
            b = self.pool.get_data_page(d * PAGE_TOKENS, flat=True).view(torch.int16)
            if not torch.equal(a, b):
                raise _Mismatch(f"{type(store).__name__}: page {s} read back into page {d} differs")
        self._forget(store, keys)
        return set_s, get_s

    def _paged_round(self, store: PagedRespStore, keys: list[str], *, whole_pages: bool) -> tuple[float, float]:
        """The same bytes from and into the store's own arena pages, as segment values or page
        values."""
        import numpy as np

        torch = _module("torch")
        per_page = 1 if whole_pages else 2
        value_keys = [f"{k}:{j}" for k in keys for j in range(per_page)]
        src = store.allocate_many(len(value_keys))
        dst = store.allocate_many(len(value_keys))
        try:
            flat = self.pool.kv_buffer.view(-1).view(torch.uint8).numpy()
            for i, page in enumerate(src):
                page.numpy()[:] = flat[i * page.size : (i + 1) * page.size]
            for page in dst:
                page.numpy()[:] = 0
            set_s, _ = _timed(lambda: store.put(value_keys, src))
            get_s, hits = _timed(lambda: store.get(value_keys, dst))
            if not all(hits):
                raise _Mismatch(f"PagedRespStore: {hits.count(False)} misses")
            for a, b in zip(src, dst):
                if not np.array_equal(a.numpy(), b.numpy()):
                    raise _Mismatch("PagedRespStore: a value read back differs")
            store.delete(value_keys)
        finally:
            for page in (*src, *dst):
                store.free(page)
        return set_s, get_s

    def _clear_dst(self) -> None:
        for d in self.dst:
            self.pool.get_data_page(d * PAGE_TOKENS, flat=False).zero_()

    def _forget(self, store: Any, keys: list[str]) -> None:
        if store is self.resp:
            store.delete_pages(keys)
        else:
            store.clear()


def _module(name: str) -> Any:
    """SGLang's and torch's modules, imported when used (the package does not depend on them)."""
    return importlib.import_module(name)


def _slots(pages: list[int]) -> Any:
    torch = _module("torch")
    return torch.cat([torch.arange(p * PAGE_TOKENS, (p + 1) * PAGE_TOKENS, dtype=torch.int64) for p in pages])


def _timed(call: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def _report(tallies: dict[str, Tally], batch_bytes: int, options: Options) -> list[str]:
    rows = [["", "set GB/s", "get GB/s", "set p50 ms", "get p50 ms"]]
    for t in tallies.values():
        rows.append([t.name, f"{t.gbps(t.set_s, batch_bytes):.2f}", f"{t.gbps(t.get_s, batch_bytes):.2f}",
                     f"{statistics.median(t.set_s) * 1e3:.1f}", f"{statistics.median(t.get_s) * 1e3:.1f}"])
    resp = tallies["resp"]
    lines = ["", f"SGLang-shaped pages, medians of {options.rounds} rounds (ABBA), {batch_bytes / GiB:.2f} GiB a batch:"]
    lines += table_lines(rows, numbers_right=True)
    for other in ("paged-seg", "paged-page", "file"):
        t = tallies[other]
        lines.append(
            f"resp / {other}: set {statistics.median(t.set_s) / statistics.median(resp.set_s):.2f}x, "
            f"get {statistics.median(t.get_s) / statistics.median(resp.get_s):.2f}x"
        )
    return lines
