"""Faults inside the engine: the Redis server under a warm start fails, and the engine must
recompute the prefix, give the cold run's tokens, and never hang.

- down before the warm phase, from before LMCache's server starts: the stack starts (our
  connector's adapter params default require_server_at_start to false: an engine serves while
  its cache tier is down), the request recomputes to the cold run's tokens in about a cold
  prefill, one WARNING says the connector started without its server; with
  `"require_server_at_start": true` LMCache's server refuses to start, naming the server;
- stopped before the warm request (the warm stack up, Redis killed after the engine's warm-up):
  the request recomputes (nothing cached), its tokens are the cold run's, it takes about a cold
  prefill, not a timeout; LMCache's log has our "is down" warning once, and one summary line per
  failed batch (the lookup's, the store's), none per key;
- killed in the middle of a warm load: Redis frozen (SIGSTOP) with the warm request's lookup and
  reads sent and unanswered, then SIGKILLed; the request ends within the connector's timeout and
  recomputes;
- flushed between phases: a miss, recomputed.

The KV is written once, by a cold run, and put back into Redis (the same bytes, by redis-py)
before each test: a killed server comes back empty.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from lmcache_resp.bench.vllm_stack import EngineError, LMCacheServer, wait_for_keys
from lmcache_resp_servers import RedisServer
from lmcache_resp_testing.servers import pause, redis_py
from vllm_helpers import ADAPTER_TIMEOUT_S, CHUNK_TOKENS, adapter, phase, prompt

P = prompt(4 * CHUNK_TOKENS + 1, seed=11)
CHUNKS = 4
MAX_TOKENS = 8


@pytest.fixture(scope="module")
def cold(redis: RedisServer, model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The cold run's result, and what it stored (key -> value)."""
    redis.command("FLUSHALL")
    with phase(adapter("ours", redis), model, tmp_path_factory.mktemp("cold")) as p:
        p.run("warmup", prompt(CHUNK_TOKENS // 2, seed=2000), 2)
        result = p.run("cold", P, MAX_TOKENS)
        wait_for_keys(redis.port, CHUNKS)
    assert result["num_cached_tokens"] == 0
    client = redis_py(redis)
    stored = {key: client.get(key) for key in client.keys("*")}
    assert len(stored) == CHUNKS
    return {"result": result, "stored": stored}


def put_back(redis: RedisServer, cold: dict[str, Any]) -> dict[str, Any]:
    """Redis holds exactly what the cold run stored; returns the cold run's result."""
    client = redis_py(redis)
    client.flushall()
    for key, value in cold["stored"].items():
        client.set(key, value)
    return cold["result"]


def assert_recomputed(result: dict[str, Any], reference: dict[str, Any]) -> None:
    """Nothing came from the cache, and the engine computed the cold run's tokens and logprobs."""
    assert result["num_cached_tokens"] == 0
    assert result["tokens"] == reference["tokens"]
    assert result["first_logprobs"] == reference["first_logprobs"]


def our_warnings(server_output: str) -> list[str]:
    """Our connector's WARNING lines (lmcache_resp's logger) in the lmcache server's output."""
    return [line for line in server_output.splitlines() if "WARNING" in line and "lmcache_resp" in line]


def test_redis_down_before_the_warm_phase_recomputes_and_never_stops_the_engine(
    redis: RedisServer, model: Path, tmp_path: Path, cold: dict[str, Any]
) -> None:
    """Redis down from before LMCache's server and the engine start (the issue's "Redis stopped
    before the warm phase"): both start, the request recomputes to the cold run's tokens in about
    a cold prefill, and our connector says once that it started without its server."""
    reference = put_back(redis, cold)
    redis.kill()
    try:
        with phase(adapter("ours", redis), model, tmp_path) as p:
            p.run("warmup", prompt(CHUNK_TOKENS // 2, seed=2003), 2)
            started = time.monotonic()
            result = p.run("warm", P, MAX_TOKENS)
            took = time.monotonic() - started
            output = p.server.output()
        assert_recomputed(result, reference)
        assert took < reference["e2e_s"] * 3 + ADAPTER_TIMEOUT_S, (took, reference["e2e_s"])
        started_without = [line for line in our_warnings(output) if "starting without the server" in line]
        assert len(started_without) == 1 and f"127.0.0.1:{redis.port}" in started_without[0], our_warnings(output)
    finally:
        redis.restart()


def test_redis_down_when_the_lmcache_server_starts_is_refused_where_the_adapter_requires_it(
    redis: RedisServer, tmp_path: Path
) -> None:
    """With `"require_server_at_start": true` in the adapter params, LMCache's server exits within
    seconds naming the server, rather than serving with an L2 that is not there."""
    redis.kill()
    try:
        started = time.monotonic()
        with pytest.raises(EngineError) as refusal:
            LMCacheServer(adapter("ours", redis, require_server_at_start=True), tmp_path, chunk_tokens=CHUNK_TOKENS)
        took = time.monotonic() - started
        assert f"cannot connect to 127.0.0.1:{redis.port}" in str(refusal.value)
        assert took < 120, took  # its start (imports) and the connect, no timeout waited out
    finally:
        redis.restart()


def test_redis_stopped_before_the_warm_request(redis: RedisServer, model: Path, tmp_path: Path,
                                               cold: dict[str, Any]) -> None:
    """A warm stack (engine and lmcache server restarted, Redis holding the prefix); Redis killed
    after the engine's warm-up, before the request that would read it."""
    reference = put_back(redis, cold)
    try:
        with phase(adapter("ours", redis), model, tmp_path) as p:
            p.run("warmup", prompt(CHUNK_TOKENS // 2, seed=2001), 2)
            redis.kill()
            started = time.monotonic()
            result = p.run("warm", P, MAX_TOKENS)
            took = time.monotonic() - started
            output = p.server.output()
        assert_recomputed(result, reference)
        # About a cold prefill (it has to compute it), not a timeout's worth on top: a dead
        # server fails fast.
        assert took < reference["e2e_s"] * 3 + ADAPTER_TIMEOUT_S, (took, reference["e2e_s"])
        # The server's state is said once ("is down", our health logger); each failed batch
        # (the lookup's EXISTS, the recomputed chunks' SET) is one summary line, never a line a key.
        warnings = our_warnings(output)
        down = [line for line in warnings if "lmcache_resp.health" in line]
        assert len(down) == 1 and f"127.0.0.1:{redis.port} is down" in down[0], warnings
        batches = [line for line in warnings if "lmcache_resp.batch" in line]
        assert all(f"of {CHUNKS} keys failed in a" in line for line in batches), batches
        assert set(warnings) == set(down) | set(batches) and len(batches) <= 2, warnings
    finally:
        if not redis.running:
            redis.restart()


def test_redis_killed_in_the_middle_of_a_warm_load(redis: RedisServer, model: Path, tmp_path: Path,
                                                   cold: dict[str, Any]) -> None:
    reference = put_back(redis, cold)
    try:
        with phase(adapter("ours", redis), model, tmp_path) as p:
            p.run("warmup", prompt(CHUNK_TOKENS // 2, seed=2002), 2)
            pause(redis)
            p.engine.submit("warm", P, MAX_TOKENS)
            time.sleep(0.5)  # the lookup's EXISTS and the prefetch's reads are on the wire, unanswered
            killed = time.monotonic()
            redis.kill()  # SIGKILL of a stopped process: its connections reset
            result = p.engine.result("warm", timeout=120)
            after_kill = time.monotonic() - killed
        assert_recomputed(result, reference)
        # The KV wait ends within the connector's timeout; the rest is the recompute.
        assert after_kill < ADAPTER_TIMEOUT_S + reference["e2e_s"] * 3, (after_kill, reference["e2e_s"])
    finally:
        if not redis.running:
            redis.restart()


def test_redis_flushed_between_phases_is_a_miss_and_recomputed(redis: RedisServer, model: Path, tmp_path: Path,
                                                              cold: dict[str, Any]) -> None:
    reference = put_back(redis, cold)
    redis.command("FLUSHALL")
    with phase(adapter("ours", redis), model, tmp_path) as p:
        p.run("warmup", prompt(CHUNK_TOKENS // 2, seed=2003), 2)
        result = p.run("warm", P, MAX_TOKENS)
        prefetches = p.prefetches()
    assert_recomputed(result, reference)
    assert prefetches == []  # LMCache logged no hit at all
