"""SGLang HiCache's storage backend (``lmcache_resp.sglang``) against a real server, without
SGLang: the implementation class (what ``RespHiCacheStorage`` adds SGLang's base class to) over
a host pool laid out as SGLang lays out its own (``lmcache_resp_testing.sglang_pool``: the same
buffers and ``get_page_buffer_meta``). scripts/test-sglang.sh drives it through SGLang's own host
pools and backend loader.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from conftest import RedisServer
from lmcache_resp_testing.sglang_pool import LAYOUTS, SGLangLikeConfig, SGLangLikePool

from lmcache_resp import InvalidInputError
from lmcache_resp.sglang._storage import RespHiCacheStorageImpl

SGLANG_KEYS = {"backend_name": "resp", "module_path": "lmcache_resp.sglang", "class_name": "RespHiCacheStorage"}


def config(server: RedisServer, **fields: Any) -> SGLangLikeConfig:
    extra = {**SGLANG_KEYS, "interface_v1": 1, "url": f"redis://127.0.0.1:{server.port}", "num_workers": 2}
    extra.update(fields.pop("extra", {}))
    return SGLangLikeConfig(extra_config=extra, **fields)


@pytest.fixture
def storages() -> Iterator[list[RespHiCacheStorageImpl]]:
    made: list[RespHiCacheStorageImpl] = []
    yield made
    for storage in made:
        storage.close()


def backend(made: list[RespHiCacheStorageImpl], server: RedisServer, pool: SGLangLikePool, **fields: Any) -> RespHiCacheStorageImpl:
    storage = RespHiCacheStorageImpl(config(server, is_mla_model=pool.mla, **fields), {})
    made.append(storage)
    storage.register_mem_pool_host(pool)
    return storage


def page_keys(n: int, tag: str = "") -> list[str]:
    return [f"{tag}{i:02d}" + "ab" * 31 for i in range(n)]


@pytest.mark.parametrize("mla", [False, True], ids=["mha", "mla"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_pages_go_out_and_come_back_into_other_pages_byte_for_byte(
    redis_server: RedisServer, storages: list[RespHiCacheStorageImpl], layout: str, mla: bool
) -> None:
    pool = SGLangLikePool(layout, mla=mla)
    storage = backend(storages, redis_server, pool)
    keys = page_keys(3)
    src, dst = [0, 1, 2], [5, 3, 6]
    assert storage.batch_exists(keys) == 0
    assert storage.batch_get_v1(keys, pool.host_indices(dst)) == [False] * 3, "a miss is False, not an exception"
    assert storage.batch_set_v1(keys, pool.host_indices(src)) == [True] * 3
    assert storage.batch_exists(keys + page_keys(2, "x")) == 3
    before = {p: pool.segments(p) for p in range(pool.page_num) if p not in dst}
    assert storage.batch_get_v1(keys, pool.host_indices(dst)) == [True] * 3
    for s, d in zip(src, dst):
        assert pool.segments(d) == pool.segments(s), f"page {s} read back into page {d}"
    assert {p: pool.segments(p) for p in before} == before, "no byte outside the pages read changed"
    # On the server: one value per segment, each holding exactly that range of the page.
    client = redis_server.redis_py()
    layout_names = storage.layout.names if storage.layout else ()
    for segment, name in zip(pool.segments(src[1]), layout_names):
        assert client.get(f"{storage.key_prefix}{keys[1]}:{name}") == segment


def test_keys_name_the_model_shard_and_layout(redis_server: RedisServer, storages: list[RespHiCacheStorageImpl]) -> None:
    mha = [backend(storages, redis_server, SGLangLikePool("page_first"), tp_rank=r, tp_size=2) for r in (0, 1)]
    assert mha[0].layout is not None and mha[0].layout.names == ("k", "v")
    assert mha[0].key_prefix != mha[1].key_prefix, "MHA ranks hold different heads: their pages never meet"
    mla = [backend(storages, redis_server, SGLangLikePool("page_first", mla=True), tp_rank=r, tp_size=2) for r in (0, 1)]
    assert mla[0].layout is not None and mla[0].layout.names == ("kv",)
    assert mla[0].key_prefix == mla[1].key_prefix, "MLA ranks hold the same latent cache: they share it"
    direct = backend(storages, redis_server, SGLangLikePool("page_first_direct"))
    other_model = backend(storages, redis_server, SGLangLikePool("page_first"), model_name="Qwen/Qwen3-8B")
    prefixes = {s.key_prefix for s in (mha[0], mla[0], direct, other_model)}
    assert len(prefixes) == 4, "model, layout and attention kind each change the namespace"
    assert all(p.startswith("sgl:") and len(p) == len("sgl:") + 16 + 1 for p in prefixes), prefixes
    # Pages stored by rank 0 are not rank 1's.
    pool = mha[0].mem_pool_host
    assert mha[0].batch_set_v1(page_keys(2), pool.host_indices([0, 1])) == [True, True]
    assert (mha[0].batch_exists(page_keys(2)), mha[1].batch_exists(page_keys(2))) == (2, 0)


def test_key_prefix_puts_the_pages_in_a_namespace(redis_server: RedisServer, storages: list[RespHiCacheStorageImpl]) -> None:
    pool = SGLangLikePool("page_first")
    storage = backend(storages, redis_server, pool, extra={"key_prefix": "tenantA", "ttl_seconds": 60})
    assert storage.batch_set_v1(page_keys(1), pool.host_indices([0])) == [True]
    names = sorted(k.decode() for k in redis_server.redis_py().keys("*"))
    assert names == [f"tenantA@{storage.key_prefix}{page_keys(1)[0]}:{n}" for n in ("k", "v")]
    assert 0 < redis_server.redis_py().ttl(names[0]) <= 60


def test_a_page_missing_one_segment_ends_the_prefix(redis_server: RedisServer, storages: list[RespHiCacheStorageImpl]) -> None:
    pool = SGLangLikePool("page_first")
    storage = backend(storages, redis_server, pool)
    keys = page_keys(4)
    assert storage.batch_set_v1(keys, pool.host_indices([0, 1, 2, 3])) == [True] * 4
    redis_server.redis_py().delete(f"{storage.key_prefix}{keys[2]}:v")
    assert storage.batch_exists(keys) == 2, "page 2 lost its V: the stored prefix is two pages"
    assert storage.batch_get_v1(keys, pool.host_indices([4, 5, 6, 7])) == [True, True, False, True]
    # A value of another length (another layout's, say) is a miss, never read into the pool.
    redis_server.redis_py().set(f"{storage.key_prefix}{keys[3]}:k", b"short")
    assert storage.batch_get_v1(keys[3:], pool.host_indices([7])) == [False]


def test_pages_already_stored_are_not_sent_again(redis_server: RedisServer, storages: list[RespHiCacheStorageImpl]) -> None:
    pool = SGLangLikePool("page_first")
    skipping = backend(storages, redis_server, pool)
    keys = page_keys(2)
    assert skipping.batch_set_v1(keys, pool.host_indices([0, 1])) == [True, True]
    k0 = f"{skipping.key_prefix}{keys[0]}:k"
    marker = b"\x00" * len(pool.segments(0)[0])
    redis_server.redis_py().set(k0, marker)
    assert skipping.batch_set_v1(keys, pool.host_indices([2, 3])) == [True, True], "already there counts as stored"
    assert redis_server.redis_py().get(k0) == marker, "a page stored already is not sent again"
    # A page missing one segment is sent whole.
    redis_server.redis_py().delete(f"{skipping.key_prefix}{keys[1]}:v")
    assert skipping.batch_set_v1(keys, pool.host_indices([2, 3])) == [True, True]
    assert redis_server.redis_py().get(f"{skipping.key_prefix}{keys[1]}:k") == pool.segments(3)[0]
    writing = backend(storages, redis_server, pool, extra={"skip_existing": False})
    assert writing.batch_set_v1(keys, pool.host_indices([2, 3])) == [True, True]
    assert redis_server.redis_py().get(k0) == pool.segments(2)[0]


def test_bad_input_is_refused_clearly(redis_server: RedisServer, storages: list[RespHiCacheStorageImpl]) -> None:
    with pytest.raises(InvalidInputError, match='"interface_v1": 1'):
        RespHiCacheStorageImpl(SGLangLikeConfig(extra_config={**SGLANG_KEYS, "url": f"redis://127.0.0.1:{redis_server.port}"}))
    with pytest.raises(InvalidInputError, match="num_worker"):
        RespHiCacheStorageImpl(config(redis_server, extra={"num_worker": 2}))
    pool = SGLangLikePool("page_first")
    storage = backend(storages, redis_server, pool)
    with pytest.raises(NotImplementedError, match="the mamba pool"):
        storage.register_mem_host_pool_v2(SGLangLikePool("page_first"), "mamba")
    storage.register_mem_host_pool_v2(pool, "kv")  # the KV pool, registered already
    with pytest.raises(NotImplementedError, match="interface_v1"):
        storage.batch_get(page_keys(1), [np.zeros(16)])
    # Slots that do not start a page, or more pages than keys: False per page, never an exception.
    assert storage.batch_set_v1(page_keys(1), pool.host_indices([0]) + 1) == [False]
    assert storage.batch_get_v1(page_keys(2), pool.host_indices([0])) == [False, False]


def test_a_dead_server_costs_milliseconds(redis_server: RedisServer, storages: list[RespHiCacheStorageImpl]) -> None:
    pool = SGLangLikePool("page_first")
    storage = backend(storages, redis_server, pool, extra={"timeout": 5})
    keys = page_keys(4)
    assert storage.batch_set_v1(keys, pool.host_indices([0, 1, 2, 3])) == [True] * 4
    redis_server.kill()
    assert storage.batch_exists(keys) == 0  # detection: the first batch finds it gone
    for call in (
        lambda: storage.batch_exists(keys),
        lambda: storage.batch_get_v1(keys, pool.host_indices([4, 5, 6, 7])),
        lambda: storage.batch_set_v1(keys, pool.host_indices([4, 5, 6, 7])),
    ):
        start = time.perf_counter()
        result = call()
        took = time.perf_counter() - start
        assert result in (0, [False] * 4), result
        assert took < 0.1, f"{took:.3f} s against a server known to be down"
