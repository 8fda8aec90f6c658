"""SGLang HiCache's storage backend (``lmcache_resp.sglang``) against a real server, without
SGLang: the implementation class (what ``RespHiCacheStorage`` adds SGLang's base class to) over
a host pool laid out as SGLang lays out its own (``lmcache_resp_testing.sglang_pool``: the same
buffers and ``get_page_buffer_meta``). scripts/test-sglang.sh drives it through SGLang's own host
pools and backend loader.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from conftest import RedisServer
from lmcache_resp_testing.sglang_pool import LAYOUTS, SGLangLikeConfig, SGLangLikePool

from lmcache_resp import InvalidInputError, RespConnectionError
from lmcache_resp.sglang._storage import RespHiCacheStorageImpl
from lmcache_resp_testing.servers import redis_py

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
    client = redis_py(redis_server)
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
    names = sorted(k.decode() for k in redis_py(redis_server).keys("*"))
    assert names == [f"tenantA@{storage.key_prefix}{page_keys(1)[0]}:{n}" for n in ("k", "v")]
    assert 0 < redis_py(redis_server).ttl(names[0]) <= 60


def test_a_page_missing_one_segment_ends_the_prefix(redis_server: RedisServer, storages: list[RespHiCacheStorageImpl]) -> None:
    pool = SGLangLikePool("page_first")
    storage = backend(storages, redis_server, pool)
    keys = page_keys(4)
    assert storage.batch_set_v1(keys, pool.host_indices([0, 1, 2, 3])) == [True] * 4
    redis_py(redis_server).delete(f"{storage.key_prefix}{keys[2]}:v")
    assert storage.batch_exists(keys) == 2, "page 2 lost its V: the stored prefix is two pages"
    assert storage.batch_get_v1(keys, pool.host_indices([4, 5, 6, 7])) == [True, True, False, True]
    # A value of another length (another layout's, say) is a miss, never read into the pool.
    redis_py(redis_server).set(f"{storage.key_prefix}{keys[3]}:k", b"short")
    assert storage.batch_get_v1(keys[3:], pool.host_indices([7])) == [False]


def test_pages_already_stored_are_not_sent_again(redis_server: RedisServer, storages: list[RespHiCacheStorageImpl]) -> None:
    pool = SGLangLikePool("page_first")
    skipping = backend(storages, redis_server, pool)
    keys = page_keys(2)
    assert skipping.batch_set_v1(keys, pool.host_indices([0, 1])) == [True, True]
    k0 = f"{skipping.key_prefix}{keys[0]}:k"
    marker = b"\x00" * len(pool.segments(0)[0])
    redis_py(redis_server).set(k0, marker)
    assert skipping.batch_set_v1(keys, pool.host_indices([2, 3])) == [True, True], "already there counts as stored"
    assert redis_py(redis_server).get(k0) == marker, "a page stored already is not sent again"
    # A page missing one segment is sent whole.
    redis_py(redis_server).delete(f"{skipping.key_prefix}{keys[1]}:v")
    assert skipping.batch_set_v1(keys, pool.host_indices([2, 3])) == [True, True]
    assert redis_py(redis_server).get(f"{skipping.key_prefix}{keys[1]}:k") == pool.segments(3)[0]
    writing = backend(storages, redis_server, pool, extra={"skip_existing": False})
    assert writing.batch_set_v1(keys, pool.host_indices([2, 3])) == [True, True]
    assert redis_py(redis_server).get(k0) == pool.segments(2)[0]


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


def test_a_server_down_when_sglang_starts_leaves_it_serving_until_the_server_is_up(
    redis_server: RedisServer, storages: list[RespHiCacheStorageImpl], caplog: pytest.LogCaptureFixture
) -> None:
    # SGLang builds its storage backend at start: a cache tier that is down then must not stop
    # SGLang (require_server_at_start defaults to false in an engine's adapter). The backend
    # starts, misses at once while the server is down, and stores and loads once it is up.
    redis_server.kill()
    caplog.set_level(logging.WARNING, logger="lmcache_resp")
    pool = SGLangLikePool("page_first")
    start = time.perf_counter()
    storage = backend(storages, redis_server, pool, extra={"timeout": 5, "connect_timeout": 0.5})
    assert time.perf_counter() - start < 5, "the start waited out the timeout"
    time.sleep(0.3)  # the core's log queue drains into logging
    said = [r.getMessage() for r in caplog.records if "starting without the server" in r.getMessage()]
    assert len(said) == 1 and f"127.0.0.1:{redis_server.port}" in said[0], said
    keys = page_keys(2)
    start = time.perf_counter()
    assert storage.batch_exists(keys) == 0
    assert storage.batch_set_v1(keys, pool.host_indices([0, 1])) == [False, False]
    assert storage.batch_get_v1(keys, pool.host_indices([2, 3])) == [False, False]
    assert time.perf_counter() - start < 0.3, "misses while the server is down cost milliseconds"
    redis_server.restart()
    deadline = time.monotonic() + 10
    while storage.batch_set_v1(keys, pool.host_indices([0, 1])) != [True, True]:
        assert time.monotonic() < deadline, "the backend never reached the server once it was up"
        time.sleep(0.05)
    assert storage.batch_get_v1(keys, pool.host_indices([2, 3])) == [True, True]
    assert pool.segments(2) == pool.segments(0) and pool.segments(3) == pool.segments(1)
    # Where the deployment says so, a server that cannot be reached at start is an error naming it.
    redis_server.kill()
    with pytest.raises(RespConnectionError, match=f"127.0.0.1:{redis_server.port}"):
        RespHiCacheStorageImpl(config(redis_server, extra={"connect_timeout": 0.5, "require_server_at_start": True}), {})


# -- issue #42: what the hostile review found ------------------------------------------------


def test_every_entry_point_after_close_answers_false_with_a_warning(
    redis_server: RedisServer, storages: list[RespHiCacheStorageImpl], caplog: pytest.LogCaptureFixture
) -> None:
    pool = SGLangLikePool("page_first")
    keys = page_keys(2)
    for skip in (True, False):
        storage = backend(storages, redis_server, pool, extra={"skip_existing": skip})
        assert storage.batch_set_v1(keys, pool.host_indices([0, 1])) == [True, True]
        storage.close()
        storage.close()  # idempotent
        caplog.clear()
        before = [pool.segments(p) for p in range(pool.page_num)]
        assert storage.batch_get_v1(keys, pool.host_indices([4, 5])) == [False, False]
        assert storage.batch_set_v1(keys, pool.host_indices([4, 5])) == [False, False]
        assert storage.batch_exists(keys) == 0
        assert storage.exists(keys[0]) is False
        assert storage.delete_pages(keys) == [False, False]
        assert [pool.segments(p) for p in range(pool.page_num)] == before, "nothing moved after close()"
        warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert len(warnings) == 5 and all("is closed" in w for w in warnings), warnings
    assert redis_py(redis_server).dbsize() == 4, "the pages stored before close() are still there"


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (dict(head_num=2, head_dim=8), dict(head_num=1, head_dim=16)),
        (dict(head_num=2, head_dim=8, layer_num=3), dict(head_num=1, head_dim=8, layer_num=6)),
        (dict(mla=True, kv_lora_rank=16, qk_rope_head_dim=8), dict(mla=True, kv_lora_rank=20, qk_rope_head_dim=4)),
    ],
    ids=["mha-heads", "mha-layers", "mla-latent"],
)
def test_pools_of_another_geometry_never_share_a_namespace(
    redis_server: RedisServer, storages: list[RespHiCacheStorageImpl], first: dict[str, Any], second: dict[str, Any]
) -> None:
    """Same model, same layout, same bytes per page: only the pages' shape differs."""
    pools = [SGLangLikePool("page_first", seed=s, **shape) for s, shape in enumerate((first, second))]
    a, b = (backend(storages, redis_server, pool) for pool in pools)
    assert a.layout is not None and b.layout is not None
    assert [s.length for s in a.layout.segments] == [s.length for s in b.layout.segments], "byte sizes alike"
    assert a.key_prefix != b.key_prefix
    keys = page_keys(2)
    assert a.batch_set_v1(keys, pools[0].host_indices([0, 1])) == [True, True]
    assert b.batch_exists(keys) == 0
    before = pools[1].segments(3)
    assert b.batch_get_v1(keys[:1], pools[1].host_indices([3])) == [False]
    assert pools[1].segments(3) == before, "another geometry's page is never read into the pool"


@pytest.mark.parametrize("skip_existing", [True, False])
def test_a_key_repeated_in_one_batch_is_stored_once_and_answers_everywhere(
    redis_server: RedisServer, storages: list[RespHiCacheStorageImpl], skip_existing: bool
) -> None:
    pool = SGLangLikePool("page_first")
    storage = backend(storages, redis_server, pool, extra={"skip_existing": skip_existing})
    a, b = page_keys(2)
    assert storage.batch_set_v1([a, b, a], pool.host_indices([0, 1, 2])) == [True, True, True]
    client = redis_py(redis_server)
    assert client.get(f"{storage.key_prefix}{a}:k") == pool.segments(0)[0], "stored once, from its first page"
    assert client.get(f"{storage.key_prefix}{b}:v") == pool.segments(1)[1]
    assert client.dbsize() == 4
    # A key read into two pages fills both; one page named twice is refused.
    assert storage.batch_get_v1([a, b, a], pool.host_indices([4, 5, 6])) == [True, True, True]
    assert pool.segments(4) == pool.segments(0) and pool.segments(6) == pool.segments(0)
    assert pool.segments(5) == pool.segments(1)
    assert storage.batch_get_v1([a, b], pool.host_indices([7, 7])) == [False, False]
    assert storage.delete_pages([a, a, b]) == [True, True, True]
    assert client.dbsize() == 0


def test_keys_and_indices_of_the_wrong_type_are_refused_by_the_adapter(
    redis_server: RedisServer, storages: list[RespHiCacheStorageImpl], caplog: pytest.LogCaptureFixture
) -> None:
    pool = SGLangLikePool("page_first")
    storage = backend(storages, redis_server, pool)
    keys = page_keys(2)
    slots = pool.host_indices([0, 1])
    for call in (lambda k: storage.batch_set_v1(k, slots), lambda k: storage.batch_get_v1(k, slots),
                 storage.delete_pages):
        caplog.clear()
        assert call([keys[0], 7]) == [False, False]
        assert "keys must be strings (SGLang's page hashes): key 1 is a int" in caplog.text
    assert storage.batch_exists([keys[0], b"bytes"]) == 0 and storage.exists(3) is False  # type: ignore[arg-type]
    for bad, said in ((slots.astype(np.float64), "not float64"), (slots.astype(str), "not <U"),
                      (np.array([0.5] * 8), "not float64"), ([0, 1, 2, "3"] * 2, "not <U")):
        caplog.clear()
        assert storage.batch_set_v1(keys, bad) == [False, False], bad
        assert "host_indices must be integer token slots" in caplog.text and said in caplog.text
    assert redis_py(redis_server).dbsize() == 0, "nothing was stored from slots that are not integers"
    for not_a_list in ("a-key", b"a-key", None, 7):
        with pytest.raises(TypeError, match="keys must be a list of page hashes"):
            storage.batch_get_v1(not_a_list, slots)  # type: ignore[arg-type]


def test_every_slot_of_every_page_is_checked(
    redis_server: RedisServer, storages: list[RespHiCacheStorageImpl], caplog: pytest.LogCaptureFixture
) -> None:
    pool = SGLangLikePool("page_first", page_size=4)
    storage = backend(storages, redis_server, pool)
    keys = page_keys(2)
    good = pool.host_indices([2, 3])
    for bad in (
        np.concatenate([good[:5], [21], good[6:]]),  # page 3's second slot in page 5
        np.concatenate([good[:4], good[4:][::-1]]),  # page 3's slots backwards (its first slot not a start)
        np.concatenate([good[:4], [12, 14, 13, 15]]),  # page 3's slots out of order
        np.concatenate([good[:4], [12, 13, 14, 14]]),  # a slot twice
    ):
        caplog.clear()
        assert storage.batch_set_v1(keys, bad) == [False, False], bad
        assert storage.batch_get_v1(keys, bad) == [False, False], bad
        assert "host_indices must" in caplog.text
    assert redis_py(redis_server).dbsize() == 0
    assert storage.batch_set_v1(keys, good) == [True, True]


def test_a_refused_re_register_leaves_the_registered_pool_whole(
    redis_server: RedisServer, storages: list[RespHiCacheStorageImpl]
) -> None:
    pool = SGLangLikePool("page_first")
    storage = backend(storages, redis_server, pool)
    layout, prefix = storage.layout, storage.key_prefix
    keys = page_keys(2)
    assert storage.batch_set_v1(keys, pool.host_indices([0, 1])) == [True, True]
    no_buffer = SimpleNamespace(page_size=4, size=32, layout="page_first", dtype="torch.bfloat16", kv_buffer=None)
    for refused in (SGLangLikePool("page_first", page_num=1), no_buffer):
        with pytest.raises(InvalidInputError):
            storage.register_mem_pool_host(refused)
        assert storage.mem_pool_host is pool and storage.layout is layout and storage.key_prefix == prefix
        assert storage.batch_get_v1(keys, pool.host_indices([5, 6])) == [True, True]
        assert (pool.segments(5), pool.segments(6)) == (pool.segments(0), pool.segments(1))
    # A pool that is accepted replaces it, whole.
    other = SGLangLikePool("page_first", seed=9)
    storage.register_mem_pool_host(other)
    assert storage.mem_pool_host is other and storage.key_prefix == prefix, "the same shape: the same namespace"
    assert storage.batch_get_v1(keys, other.host_indices([2, 3])) == [True, True]
    assert (other.segments(2), other.segments(3)) == (pool.segments(0), pool.segments(1))


def test_sglangs_own_extra_config_keys_are_accepted(
    redis_server: RedisServer, storages: list[RespHiCacheStorageImpl]
) -> None:
    """Every key SGLang 0.5.23 itself reads from --hicache-storage-backend-extra-config,
    whichever backend: "allocator": "shm" (its shared-memory host pool), file_storage_path (added
    by its unified radix cache), the prefetch tuning (left in the dict on the decode offload
    path) and tp_lcm_size."""
    sglangs = {"allocator": "shm", "file_storage_path": "/srv/kv", "prefetch_threshold": 256,
               "prefetch_timeout_base": 1, "prefetch_timeout_per_ki_token": 0.25,
               "hicache_storage_pass_prefix_keys": False, "tp_lcm_size": 2}
    pool = SGLangLikePool("page_first")
    storage = backend(storages, redis_server, pool, extra=sglangs)
    assert storage.batch_set_v1(page_keys(1), pool.host_indices([0])) == [True]
    with pytest.raises(InvalidInputError, match=r"'alocator'"):
        RespHiCacheStorageImpl(config(redis_server, extra={"alocator": "shm"}))
