"""Fixtures for the tests inside a real vLLM (run by scripts/test-vllm-tier.sh only).

vLLM's own classes on CPU: ``TieringOffloadingSpec(config).get_manager()`` builds the CPU primary
tier on its ``SharedOffloadRegion`` (a real /dev/shm mapping, pre-faulted, of the size vLLM
computes from ``cpu_bytes_to_use`` and the model's KV bytes per block) and our tier through
``SecondaryTierFactory`` with ``module_path``; the tests drive vLLM's ``TieringOffloadingManager``
as its scheduler-side connector does (``on_new_request``, ``lookup``, ``prepare_store`` /
``complete_store``, ``on_schedule_end``, ``prepare_load`` / ``complete_load``,
``on_request_finished``).

What is substituted on CPU, and why:

- ``OffloadingConfig`` is built here, with the values vLLM's ``build_offloading_config`` derives
  from a ``VllmConfig`` for Qwen3-0.6B (28 layers, 8 KV heads of 128, bfloat16, 16-token
  blocks): a ``VllmConfig`` needs the model's Hugging Face config, which cannot be downloaded
  here.
- The worker's GPU-to-CPU copy: ``CPUOffloadingWorker`` asserts a CUDA or XPU tensor, so the
  tests write the primary rows themselves (random bytes) between ``prepare_store`` and
  ``complete_store``, where the worker's copy would land, and read them back after a load.

Each test talks to a real, throwaway redis-server (never port 6379).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from lmcache_resp_servers import RedisServer
from lmcache_resp_testing.servers import redis_py

TIER = {"type": "RespSecondaryTierManager", "module_path": "lmcache_resp.vllm"}
LAYERS = 28
# K and V, 28 layers, 16 tokens, 8 heads of 128 bfloat16: Qwen3-0.6B's KV bytes per block.
WORKER_KV_BYTES_PER_BLOCK = 2 * LAYERS * 16 * 8 * 128 * 2
_engine_ids = itertools.count()


@pytest.fixture(scope="session")
def redis_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.kill()


@pytest.fixture
def redis_server(redis_session: RedisServer) -> RedisServer:
    """The session's server, emptied for this test."""
    redis_py(redis_session).flushall()
    return redis_session


@pytest.fixture
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A server of the test's own, for a test that kills it."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.kill()


def offloading_config(tier: dict[str, Any], *, chunks: int = 16, engine_id: str | None = None,
                      model: str = "Qwen/Qwen3-0.6B", extra: dict[str, Any] | None = None) -> Any:
    """vLLM's ``OffloadingConfig`` for one worker (TP 1) of Qwen3-0.6B, with a primary of
    ``chunks`` rows and ``tier`` as the only secondary tier."""
    from vllm.v1.kv_offload.config import (
        OffloadingCacheConfig,
        OffloadingConfig,
        OffloadingGroupConfig,
        OffloadingModelConfig,
        OffloadingParallelConfig,
    )

    layers = tuple(f"model.layers.{i}.self_attn.attn" for i in range(LAYERS))
    return OffloadingConfig(
        groups=(OffloadingGroupConfig(tokens_per_block=16, layer_names=layers, group_id=0),),
        worker_kv_bytes_per_block=WORKER_KV_BYTES_PER_BLOCK,
        enable_kv_cache_events=False,
        extra_config={"cpu_bytes_to_use": chunks * WORKER_KV_BYTES_PER_BLOCK, "secondary_tiers": [dict(tier)],
                      **(extra or {})},
        engine_id=engine_id or f"resp_tier_test_{next(_engine_ids)}",
        model=OffloadingModelConfig(name=model, dtype="bfloat16"),
        cache=OffloadingCacheConfig(tokens_per_hash=16, blocks_per_chunk=1),
        parallel=OffloadingParallelConfig(
            rank=0, world_size=1, tp_size=1, pp_size=1, pcp_size=1, dcp_size=1, data_parallel_index=0,
            data_parallel_size=1, data_parallel_rank_local=None, is_parallelism_agnostic=False,
        ),
    )


def tier_config(server: RedisServer, **settings: Any) -> dict[str, Any]:
    return {**TIER, "url": f"redis://127.0.0.1:{server.port}", "num_workers": 2, **settings}


class Engine:
    """vLLM's spec and tiering manager, driven as its scheduler-side connector drives them."""

    def __init__(self, tier: dict[str, Any], **config: Any) -> None:
        from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

        self.spec = TieringOffloadingSpec(offloading_config(tier, **config))
        self.manager = self.spec.get_manager()
        self.tier = self.manager.secondary_tiers[0]
        view = self.manager.primary_tier.get_kv_memoryview()
        # The test's own window on the primary, standing in for the worker's DMA.
        self.rows: Any = np.frombuffer(view, dtype=np.int8).reshape(view.shape)
        self._requests = itertools.count()

    def request(self) -> Any:
        from vllm.v1.kv_offload.base import ReqContext

        context = ReqContext(req_id=f"req-{next(self._requests)}")
        self.manager.on_new_request(context)
        return context

    def step(self) -> None:
        from vllm.v1.kv_offload.base import ScheduleEndContext

        self.manager.on_schedule_end(ScheduleEndContext(new_req_ids=(), preempted_req_ids=()))

    def settle(self, timeout: float = 10.0) -> float:
        """Steps until the manager has no work in flight; returns the seconds it took."""
        start = time.monotonic()
        while self.manager.has_pending_work():
            assert time.monotonic() - start < timeout, "the tier's jobs did not complete"
            self.step()
            time.sleep(0.001)
        return time.monotonic() - start

    def store(self, keys: list[bytes], seed: int) -> dict[bytes, bytes]:
        """Stores ``keys`` as vLLM's connector does after a forward pass: ``prepare_store``
        allocates primary rows, the rows are written (here: random bytes, where the worker's
        GPU-to-CPU copy lands), ``complete_store`` cascades them to the tier. Returns each
        key's row as written."""
        context = self.request()
        out = self.manager.prepare_store(keys, context)
        assert out is not None and list(out.keys_to_store) == keys
        chunk_ids = np.asarray(out.store_spec.chunk_ids)
        data = np.random.default_rng(seed).integers(-128, 128, size=(len(keys), self.rows.shape[1]), dtype=np.int8)
        self.rows[chunk_ids] = data
        self.manager.complete_store(keys, context, True)
        self.manager.on_request_finished(context)
        return {key: data[i].tobytes() for i, key in enumerate(keys)}

    def look_up(self, keys: list[bytes], context: Any, timeout: float = 10.0) -> list[Any]:
        """Looks ``keys`` up as the scheduler does, a step at a time, until no answer is
        RETRY or HIT_PENDING (a promotion from the tier in flight); returns the answers."""
        from vllm.v1.kv_offload.base import LookupResult

        start = time.monotonic()
        while True:
            answers = [self.manager.lookup(key, context) for key in keys]
            if not any(a in (LookupResult.RETRY, LookupResult.HIT_PENDING) for a in answers):
                return answers
            assert time.monotonic() - start < timeout, f"lookups still pending: {answers}"
            self.step()
            time.sleep(0.001)

    def read(self, keys: list[bytes], context: Any) -> dict[bytes, bytes]:
        """Each key's primary row, pinned as for a GPU load (``prepare_load``)."""
        spec = self.manager.prepare_load(keys, context)
        rows = {key: self.rows[int(c)].tobytes() for key, c in zip(keys, np.asarray(spec.chunk_ids))}
        self.manager.complete_load(keys, context)
        return rows

    def evict(self, count: int, seed: int) -> None:
        """Fills the primary with ``count`` other rows: LRU evicts what was there."""
        self.store(keys_for("evict", count, seed), seed)
        self.settle()

    def close(self) -> None:
        """vLLM's shutdown, the tier's first; the test's window on the primary goes before it
        (vLLM keeps its mapping while any buffer of it is still exported)."""
        self.rows = None
        self.manager.shutdown()


def keys_for(tag: str, count: int, seed: int = 0) -> list[bytes]:
    """vLLM's ``OffloadKey``s: a 32-byte block hash and the 4-byte group index."""
    from vllm.v1.kv_offload.base import make_offload_key

    rng = np.random.default_rng(abs(hash((tag, seed))) % 2**32)
    return [make_offload_key(rng.bytes(32), 0) for _ in range(count)]


@pytest.fixture
def engines() -> Iterator[Callable[..., Engine]]:
    made: list[Engine] = []

    def make(tier: dict[str, Any], **config: Any) -> Engine:
        engine = Engine(tier, **config)
        made.append(engine)
        return engine

    yield make
    for engine in made:
        try:
            engine.close()
        except Exception:  # already shut down by the test
            pass
