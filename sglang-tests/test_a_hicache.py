"""RespHiCacheStorage inside SGLang 0.5.23, on CPU: SGLang's own host pools (MHA and MLA, each
layout), its own backend loader (``StorageBackendFactory.create_backend("dynamic", ...)`` with the
JSON of ``--hicache-storage-backend-extra-config``), its own page hashes, and its own cache
controller's page methods: ``_page_set_zero_copy`` and ``_page_get_zero_copy`` (what the
controller picks for a ``dynamic`` backend with ``"interface_v1": 1``) and ``_storage_hit_query``
(the prefetch's hit count through ``batch_exists``). Pages are stored from some pages of the
pool and read back into others; every byte is compared through SGLang's ``get_data_page``.

The controller's methods run on a namespace holding what they read (``storage_backend``,
``storage_host_pool``, ``page_size``), as SGLang's own CPU unit tests of storage backends drive
them (``test/registered/unit/mem_cache/test_hicache_seaweedfs_storage.py``): a whole
``HiCacheController`` needs CUDA streams and torch.distributed groups.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from conftest import PAGE, host_pool, page_bytes

from lmcache_resp import InvalidInputError
from lmcache_resp_servers import RedisServer
from lmcache_resp_testing.servers import redis_py
from sglang.srt.managers.cache_controller import HiCacheController
from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig, HiCacheStorageExtraInfo
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory
from sglang.srt.mem_cache.utils import get_storage_hash_str

LAYOUTS = ("layer_first", "page_first", "page_first_direct")


def extra_config(server: RedisServer, **more: Any) -> dict[str, Any]:
    """What --hicache-storage-backend-extra-config carries (docs/sglang.md)."""
    return {"backend_name": "resp", "module_path": "lmcache_resp.sglang", "class_name": "RespHiCacheStorage",
            "interface_v1": 1, "url": f"redis://127.0.0.1:{server.port}", "num_workers": 2, **more}


def storage_config(server: RedisServer, kind: str, layout: str, *, tp_rank: int = 0, tp_size: int = 1,
                   extra: dict[str, Any] | None = None) -> HiCacheStorageConfig:
    return HiCacheStorageConfig(
        tp_rank=tp_rank, tp_size=tp_size, pp_rank=0, pp_size=1, attn_cp_rank=0, attn_cp_size=1,
        is_mla_model=kind == "mla", enable_storage_metrics=False, is_page_first_layout=layout != "layer_first",
        model_name="meta-llama/Llama-3.1-8B-Instruct", extra_config=extra if extra is not None else extra_config(server),
    )


class Stores:
    """Backends made by SGLang's loader, closed after the test."""

    def __init__(self) -> None:
        self.made: list[Any] = []

    def make(self, server: RedisServer, pool: Any, kind: str, layout: str, **fields: Any) -> Any:
        config = storage_config(server, kind, layout, **fields)
        store = StorageBackendFactory.create_backend("dynamic", config, pool)
        self.made.append(store)
        store.register_mem_pool_host(pool)
        return store


@pytest.fixture
def stores() -> Any:
    made = Stores()
    yield made
    for store in made.made:
        store.close()


def controller(store: Any, pool: Any) -> SimpleNamespace:
    return SimpleNamespace(storage_backend=store, storage_host_pool=pool, mem_pool_host=pool, page_size=PAGE)


def tokens(pages: int, seed: int = 0) -> list[int]:
    return torch.randint(0, 128_000, (pages * PAGE,), generator=torch.Generator().manual_seed(seed)).tolist()


def slots(pages: list[int]) -> torch.Tensor:
    """Token slots of host-pool pages, as SGLang's host allocator hands them out."""
    return torch.cat([torch.arange(p * PAGE, (p + 1) * PAGE, dtype=torch.int64) for p in pages])


def prefetch(request: str = "r") -> SimpleNamespace:
    return SimpleNamespace(request_id=request, is_terminated=lambda: False)


def hit_query(ctrl: SimpleNamespace, token_ids: list[int]) -> int:
    """SGLang's own prefetch hit query: pages of ``token_ids`` found stored, counted in tokens."""
    operation = SimpleNamespace(last_hash=None, token_ids=token_ids, prefix_keys=None)
    _hashes, hit_tokens = HiCacheController._storage_hit_query(ctrl, operation)
    return int(hit_tokens)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", ["mha", "mla"])
def test_sglangs_controller_stores_pages_and_reads_them_back_into_other_pages(
    redis_server: RedisServer, stores: Stores, kind: str, layout: str
) -> None:
    pool = host_pool(kind, layout)
    store = stores.make(redis_server, pool, kind, layout)
    assert isinstance(store, HiCacheStorage) and type(store).__name__ == "RespHiCacheStorage"
    ctrl = controller(store, pool)
    token_ids = tokens(3)
    keys = get_storage_hash_str(token_ids, None, page_size=PAGE)
    assert len(keys) == 3
    assert hit_query(ctrl, token_ids) == 0
    src, dst = [0, 1, 2], [6, 4, 7]
    info = HiCacheStorageExtraInfo(prefix_keys=[])
    assert HiCacheController._page_set_zero_copy(ctrl, keys, slots(src), info) is True
    assert hit_query(ctrl, token_ids) == 3 * PAGE
    untouched = {p: page_bytes(pool, p) for p in range(pool.size // PAGE) if p not in dst}
    assert HiCacheController._page_get_zero_copy(ctrl, prefetch(), keys, slots(dst), info) == 3
    for s, d in zip(src, dst):
        assert page_bytes(pool, d) == page_bytes(pool, s), f"page {s} read back into page {d}"
    assert {p: page_bytes(pool, p) for p in untouched} == untouched, "no other page changed"


def test_a_prefetch_stops_at_the_first_missing_page(redis_server: RedisServer, stores: Stores) -> None:
    pool = host_pool("mha", "page_first")
    store = stores.make(redis_server, pool, "mha", "page_first")
    ctrl = controller(store, pool)
    token_ids = tokens(4, seed=1)
    keys = get_storage_hash_str(token_ids, None, page_size=PAGE)
    assert HiCacheController._page_set_zero_copy(ctrl, keys, slots([0, 1, 2, 3])) is True
    redis_py(redis_server).delete(f"{store.key_prefix}{keys[2]}:v")
    assert hit_query(ctrl, token_ids) == 2 * PAGE, "page 2 lost its V: two pages are usable"
    assert HiCacheController._page_get_zero_copy(ctrl, prefetch(), keys, slots([4, 5, 6, 7])) == 2
    assert [page_bytes(pool, p) for p in (4, 5)] == [page_bytes(pool, p) for p in (0, 1)]


def test_mla_ranks_share_pages_and_mha_ranks_do_not(redis_server: RedisServer, stores: Stores) -> None:
    token_ids = tokens(2, seed=2)
    keys = get_storage_hash_str(token_ids, None, page_size=PAGE)
    for kind, shared in (("mla", True), ("mha", False)):
        pools = [host_pool(kind, "page_first") for _ in range(2)]
        ranks = [stores.make(redis_server, pools[r], kind, "page_first", tp_rank=r, tp_size=2) for r in range(2)]
        assert HiCacheController._page_set_zero_copy(controller(ranks[0], pools[0]), keys, slots([0, 1])) is True
        assert hit_query(controller(ranks[1], pools[1]), token_ids) == (2 * PAGE if shared else 0), kind
        if shared:
            got = HiCacheController._page_get_zero_copy(controller(ranks[1], pools[1]), prefetch(), keys, slots([5, 6]))
            assert got == 2
            assert [page_bytes(pools[1], p) for p in (5, 6)] == [page_bytes(pools[0], p) for p in (0, 1)]


def test_sglangs_loader_refuses_a_config_without_the_zero_copy_interface(redis_server: RedisServer) -> None:
    pool = host_pool("mha", "page_first")
    config = storage_config(redis_server, "mha", "page_first", extra={
        k: v for k, v in extra_config(redis_server).items() if k != "interface_v1"})
    with pytest.raises(InvalidInputError, match='"interface_v1": 1'):
        StorageBackendFactory.create_backend("dynamic", config, pool)


def test_a_dead_server_costs_the_controller_milliseconds(tmp_path: Any, stores: Stores) -> None:
    server = RedisServer(tmp_path)
    try:
        pool = host_pool("mha", "page_first")
        store = stores.make(server, pool, "mha", "page_first", extra=extra_config(server, timeout=5))
        ctrl = controller(store, pool)
        token_ids = tokens(2, seed=3)
        keys = get_storage_hash_str(token_ids, None, page_size=PAGE)
        assert HiCacheController._page_set_zero_copy(ctrl, keys, slots([0, 1])) is True
    finally:
        server.kill()
    assert hit_query(ctrl, token_ids) == 0  # the first batch after the kill finds it down
    start = time.perf_counter()
    assert hit_query(ctrl, token_ids) == 0
    assert HiCacheController._page_get_zero_copy(ctrl, prefetch(), keys, slots([4, 5])) == 0
    assert HiCacheController._page_set_zero_copy(ctrl, keys, slots([0, 1])) is False
    took = time.perf_counter() - start
    assert took < 0.3, f"{took:.3f} s for three batches against a server known to be down"


# -- issue #42 --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["mha", "mla"])
def test_sglangs_shared_memory_allocator_and_its_config_key(redis_server: RedisServer, stores: Stores, kind: str) -> None:
    """``"allocator": "shm"`` is SGLang's own key (pool_host/common.py's get_allocator_type reads it
    from the extra config and leaves it there): the backend accepts it, and serves the pool SGLang's
    ShmHostTensorAllocator allocates (a memfd mapping, not torch's allocator)."""
    from sglang.srt.mem_cache.pool_host.common import ShmHostTensorAllocator

    pool = host_pool(kind, "page_first", allocator_type="shm")
    assert isinstance(pool.allocator, ShmHostTensorAllocator) and pool.allocator.fd is not None
    store = stores.make(redis_server, pool, kind, "page_first", extra=extra_config(redis_server, allocator="shm"))
    ctrl = controller(store, pool)
    token_ids = tokens(2, seed=4)
    keys = get_storage_hash_str(token_ids, None, page_size=PAGE)
    assert HiCacheController._page_set_zero_copy(ctrl, keys, slots([0, 1])) is True
    assert HiCacheController._page_get_zero_copy(ctrl, prefetch(), keys, slots([5, 6])) == 2
    assert [page_bytes(pool, p) for p in (5, 6)] == [page_bytes(pool, p) for p in (0, 1)]


def test_the_controller_after_close_gets_false_never_an_exception(redis_server: RedisServer, stores: Stores) -> None:
    pool = host_pool("mha", "page_first")
    token_ids = tokens(2, seed=5)
    keys = get_storage_hash_str(token_ids, None, page_size=PAGE)
    for skip in (True, False):
        store = stores.make(redis_server, pool, "mha", "page_first", extra=extra_config(redis_server, skip_existing=skip))
        ctrl = controller(store, pool)
        assert HiCacheController._page_set_zero_copy(ctrl, keys, slots([0, 1])) is True
        store.close()
        before = [page_bytes(pool, p) for p in (5, 6)]
        assert HiCacheController._page_set_zero_copy(ctrl, keys, slots([2, 3])) is False
        assert HiCacheController._page_get_zero_copy(ctrl, prefetch(), keys, slots([5, 6])) == 0
        assert hit_query(ctrl, token_ids) == 0
        assert [page_bytes(pool, p) for p in (5, 6)] == before


def test_sglang_pools_of_another_head_geometry_never_share_pages(redis_server: RedisServer, stores: Stores) -> None:
    """Same model, layout and bytes per page; 2 heads of 16 against 1 head of 32."""
    pools = [host_pool("mha", "page_first", head_num=2, head_dim=16), host_pool("mha", "page_first", head_num=1, head_dim=32)]
    a, b = (stores.make(redis_server, pool, "mha", "page_first") for pool in pools)
    assert [s.length for s in a.layout.segments] == [s.length for s in b.layout.segments]
    assert a.key_prefix != b.key_prefix
    token_ids = tokens(2, seed=6)
    keys = get_storage_hash_str(token_ids, None, page_size=PAGE)
    assert HiCacheController._page_set_zero_copy(controller(a, pools[0]), keys, slots([0, 1])) is True
    assert hit_query(controller(b, pools[1]), token_ids) == 0


def test_a_page_hash_twice_in_one_backup_is_stored_once(redis_server: RedisServer, stores: Stores) -> None:
    pool = host_pool("mla", "page_first")
    store = stores.make(redis_server, pool, "mla", "page_first")
    keys = get_storage_hash_str(tokens(1, seed=7), None, page_size=PAGE)
    assert HiCacheController._page_set_zero_copy(controller(store, pool), keys * 2, slots([0, 1])) is True
    assert redis_py(redis_server).get(f"{store.key_prefix}{keys[0]}:kv") == page_bytes(pool, 0)
