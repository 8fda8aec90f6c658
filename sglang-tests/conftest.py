"""Fixtures for the tests inside a real SGLang (run by scripts/test-sglang.sh only).

SGLang's own classes, built on CPU the way its assembler builds them
(``sglang/srt/mem_cache/hybrid_cache/hybrid_pool_assembler.py``): a device KV pool on
``device="cpu"``, and the host pool from its buffer info (``_mha_host_inputs`` for MHA, the same
keywords ``build_kv_host_pool`` passes for MLA). ``build_kv_host_pool`` itself is not called: it
reads the server's global arguments and parallel groups, which only a launched server has.
``pin_memory=False``: pinned memory needs CUDA; it changes how the pool is allocated, not its
layout. Each test talks to a real, throwaway redis-server (never port 6379), from the test-support
package like every other suite.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch

from lmcache_resp_servers import RedisServer
from lmcache_resp_testing.servers import redis_py

PAGE = 64  # tokens per page, SGLang's --page-size in its examples
MHA = dict(head_num=2, head_dim=16, layer_num=3)
MLA = dict(kv_lora_rank=32, qk_rope_head_dim=8, layer_num=3)


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


def host_pool(kind: str, layout: str, device_tokens: int = 4 * PAGE, *, allocator_type: str = "default",
              **shape: int) -> Any:
    """SGLang's own host pool (``MHATokenToKVPoolHost`` or ``MLATokenToKVPoolHost``) over a CPU
    device pool, twice the device pool's size, filled with random bytes; ``allocator_type``
    "shm" allocates it with SGLang's shared-memory host allocator; ``shape`` overrides MHA/MLA."""
    from sglang.srt.mem_cache.hybrid_cache.hybrid_pool_assembler import _mha_host_inputs
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool
    from sglang.srt.mem_cache.pool_host.mla import MLATokenToKVPoolHost

    common = dict(size=device_tokens, page_size=PAGE, dtype=torch.bfloat16, device="cpu", enable_memory_saver=False)
    if kind == "mha":
        device = MHATokenToKVPool(**common, **{**MHA, **shape})
        cls, info, kwargs = _mha_host_inputs(device)
    else:
        device = MLATokenToKVPool(**common, **{**MLA, **shape})
        cls, info = MLATokenToKVPoolHost, device.get_device_pool_infos()[0].buffer_info
        kwargs = dict(device_capacity_tokens=device.size, start_layer=device.start_layer, end_layer=device.end_layer,
                      draft_buffer_infos=(), layer_shard_enabled=False, target_layer_num=device.layer_num,
                      override_kv_cache_dim=device.kv_cache_dim)
    pool = cls(info, 2.0, 0, PAGE, layout, pin_memory=False, device="cpu", allocator_type=allocator_type, **kwargs)
    raw = pool.kv_buffer.view(-1).view(torch.int16)
    raw.copy_(torch.randint(-(1 << 15), 1 << 15, raw.shape, dtype=torch.int16, generator=torch.Generator().manual_seed(7)))
    return pool


def page_bytes(pool: Any, page: int) -> bytes:
    """Every byte of a page, through SGLang's own page accessor (as raw bytes: random bf16 bit
    patterns include NaNs, which never compare equal as numbers)."""
    return pool.get_data_page(page * PAGE, flat=True).contiguous().view(torch.uint8).numpy().tobytes()
