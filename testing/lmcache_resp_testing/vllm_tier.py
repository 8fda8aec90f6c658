"""A STAND-IN for vLLM's secondary-tier API, for the CI suite that runs without vLLM
(py-tests/test_vllm_tier.py). Nothing here is vLLM: scripts/test-vllm-tier.sh runs the tier
through vLLM's own factory, spec, tiering manager and shared region (vllm-tier-tests/).

What is transcribed, from vllm 0.34.0 (``vllm/v1/kv_offload/``):

- ``StandInTierBase``: ``tiering/base.py``'s ``SecondaryTierManager.__init__`` (what it sets);
- ``JobResult``, ``LookupResult``, ``RequestOffloadingContext``, ``Locality``, the metric
  metadata and ``OffloadingConnectorStats``' three recording methods: the same names and fields;
- ``StandInFileMapper``: ``file_mapper.py``'s fields (the tier hashes them into its namespace);
- ``primary_view``: the view ``SharedOffloadRegion.create_kv_memoryview`` makes, a 2-D memoryview
  of signed bytes (format ``'b'``) over a shared mapping, one page-aligned row per chunk;
- ``spec``: the ``OffloadingSpec`` fields the tier reads (``config``, ``blocks_per_chunk``).
"""

from __future__ import annotations

import mmap
import os
import tempfile
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any

import numpy as np

from lmcache_resp.vllm import VllmApi

__all__ = ["PrimaryRegion", "StandInTierBase", "stand_in_api", "stand_in_spec"]


class StandInTierBase:
    """What vLLM's ``SecondaryTierManager.__init__`` sets (no ABC checks, no other methods)."""

    def __init__(self, offloading_spec: Any, primary_kv_view: memoryview, tier_type: str,
                 backpressure_detector: Any = None) -> None:
        self._offloading_spec = offloading_spec
        self._primary_kv_view = primary_kv_view
        assert primary_kv_view.strides is not None
        self._block_size_bytes = primary_kv_view.strides[0]
        self.tier_type = tier_type
        self.locality: Any = None
        self._bp_detector = backpressure_detector


@dataclass
class JobResult:
    job_id: int
    success: bool
    successful_keys: Any = None
    transfer_time: float | None = None
    transfer_bytes: int | None = None


class LookupResult(Enum):
    MISS = auto()
    HIT = auto()
    HIT_PENDING = auto()
    RETRY = auto()


@dataclass
class RequestOffloadingContext:
    policy: str = "chunk_level"


class Locality(Enum):
    LOCAL = "LOCAL"
    REMOTE = "REMOTE"


@dataclass(frozen=True)
class Counter:
    documentation: str
    labelnames: tuple[str, ...] = ()


@dataclass(frozen=True)
class Gauge:
    documentation: str
    labelnames: tuple[str, ...] = ()


@dataclass(frozen=True)
class Histogram:
    documentation: str
    labelnames: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None


@dataclass
class Stats:
    """``OffloadingConnectorStats``' recording methods, over one dict per kind."""

    counters: dict[tuple[str, tuple[str, ...]], float] = field(default_factory=dict)
    gauges: dict[tuple[str, tuple[str, ...]], float] = field(default_factory=dict)
    histograms: dict[tuple[str, tuple[str, ...]], list[float]] = field(default_factory=dict)

    def increase_counter(self, name: str, value: float = 1, labelvalues: tuple[str, ...] = ()) -> None:
        self.counters[name, labelvalues] = self.counters.get((name, labelvalues), 0) + value

    def set_gauge(self, name: str, value: float, labelvalues: tuple[str, ...] = ()) -> None:
        self.gauges[name, labelvalues] = value

    def observe_histogram(self, name: str, value: float, labelvalues: tuple[str, ...] = ()) -> None:
        self.histograms.setdefault((name, labelvalues), []).append(value)

    def is_empty(self) -> bool:
        return not (self.counters or self.gauges or self.histograms)


class StandInFileMapper:
    """``FileMapper.from_offloading_spec``'s fields, without the parallelism-agnostic rules."""

    def __init__(self, fields: dict[str, Any], rank: int) -> None:
        self.fields, self.rank = fields, rank

    @classmethod
    def from_offloading_spec(cls, root_dir: str, offloading_spec: Any, blocks_per_file: int = 1,
                             parallel_agnostic: bool = False) -> StandInFileMapper:
        config = offloading_spec.config
        fields = {
            "model_name": config["model"], "tokens_per_hash": config["tokens_per_hash"],
            "blocks_per_file": blocks_per_file, "tp_size": config["tp_size"], "pp_size": 1, "pcp_size": 1,
            "dcp_size": 1, "dtype": config["dtype"], "kv_cache_groups": config["groups"], "inference_engine": "vllm",
            "parallel_agnostic": False,
        }
        return cls(fields, config["rank"])

    def get_run_config(self) -> dict[str, Any]:
        return dict(self.fields)


def stand_in_api() -> VllmApi:
    return VllmApi(
        base=StandInTierBase, job_result=JobResult, lookup_result=LookupResult,
        request_context=RequestOffloadingContext, locality=Locality, file_mapper=StandInFileMapper,
        counter=Counter, gauge=Gauge, histogram=Histogram, stats=Stats, version="stand-in for vllm 0.34.0",
    )


@dataclass
class StandInSpec:
    config: dict[str, Any]
    blocks_per_chunk: int


def stand_in_spec(model: str = "Qwen/Qwen3-0.6B", tp_size: int = 1, rank: int = 0, dtype: str = "bfloat16",
                  blocks_per_chunk: int = 1) -> StandInSpec:
    """An ``OffloadingSpec`` as the tier reads it: one KV cache group of 28 layers, 16 tokens a
    block."""
    groups = [{"tokens_per_block": 16, "layer_names": [f"model.layers.{i}.self_attn.attn" for i in range(28)]}]
    config = {"model": model, "tokens_per_hash": 16, "tp_size": tp_size, "rank": rank, "dtype": dtype, "groups": groups}
    return StandInSpec(config, blocks_per_chunk)


class PrimaryRegion:
    """vLLM's primary tier memory as ``SharedOffloadRegion`` makes it: ``rows`` chunk rows of
    ``row_bytes`` (rounded up to the page size, as vLLM rounds ``kv_bytes_per_chunk``) in one
    shared file mapping, and the tier's view of it, ``create_kv_memoryview``'s: 2-D, format
    ``'b'`` (vLLM takes it from an int8 tensor's numpy array)."""

    def __init__(self, rows: int, row_bytes: int) -> None:
        page = mmap.PAGESIZE
        self.row_bytes = -(-row_bytes // page) * page
        self.rows = rows
        fd, path = tempfile.mkstemp(prefix="vllm_offload_standin_", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        try:
            os.ftruncate(fd, rows * self.row_bytes)
            self._mmap = mmap.mmap(fd, rows * self.row_bytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
            os.unlink(path)
        self.array = np.frombuffer(self._mmap, dtype=np.int8).reshape(rows, self.row_bytes)
        self.view = self.array.data  # memoryview(array): 2-D, format 'b'

    def fill(self, rows: Any, seed: int) -> None:
        """Random bytes into ``rows`` (what vLLM's worker's GPU-to-CPU copy would have put there)."""
        data = np.random.default_rng(seed).integers(-128, 128, size=(len(rows), self.row_bytes), dtype=np.int8)
        self.array[np.asarray(rows)] = data

    def row(self, index: int) -> bytes:
        return bytes(self.array[index].tobytes())

    def close(self) -> None:
        self.view.release()
        del self.array
        self._mmap.close()
