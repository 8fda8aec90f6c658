"""A real vLLM engine on CPU whose prefill is skipped through LMCache's MP server and our
RespConnector: what comes back from Redis is the KV the engine computed, and the engine's output
proves it.

The phases (vllm_helpers.phase: a fresh ``lmcache server`` and a fresh engine each; Redis kept):

1. cold (Redis empty): an unrelated warm-up prompt, then P1 (1025 tokens) and P4 (4097), each
   followed by the same prompt again, which vLLM's own prefix cache (on in this phase only)
   serves: the *reference*, the engine computing only the last prompt token on top of the KV it
   has, exactly as a warm start from L2 does. LMCache writes the 4 + 16 full chunks to Redis.
2. warm (engine and LMCache server restarted, so LMCache's L1 and vLLM's cache are empty): P1 and
   P4 come back from Redis. Gates: every full chunk hit (num_cached_tokens), LMCache's prefetch
   line says all from L2 and none from L1, Redis counted one read per chunk; the first token
   equals the cold run's and its top-5 logprobs are within bf16 rounding of it; every token and
   logprob equals the reference's; for P4, every token and logprob equals the cold run's.
3. warm again: the same tokens as the first warm run; and a prompt sharing only P4's first 2
   chunks reuses exactly those 512 tokens (2 chunks read).
4. LMCache's own ``resp`` and ``valkey`` L2 adapters in place of ours, on the same keys: the same
   tokens (the adapters agree with each other).
5. every value in Redis negated: the output changes (the KV matters under these weights, so
   "tokens identical" above proves something).

Why the cold run gives "all tokens equal" only for P4, and the reference is used for both: the
warm engine computes only the last prompt token (M = 1) over the loaded KV, the cold one
computes it inside its prefill step (P1: all 1025 tokens at once; P4: 2048 + 2048 + 1, so its
last token alone, like the warm run's). bf16 matrix products of different shapes round
differently, so that token's hidden state and its K/V differ in their last bits; where two
candidates' logits are close (this model's output is flat) a later greedy token can flip. The
reference computes the last token the same way without LMCache or Redis and matches the warm run
bit for bit, which locates the flips in vLLM's arithmetic, not in the KV's journey; P4, whose
cold run computes its last token alone too, matches the cold run bit for bit; and P1's first
token, computed before any such K/V is used, matches its cold run. (The 2026-12-06 run: P1's
first-token logprobs 0.016 apart, its tokens apart from the 5th on; P4's identical.)
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from lmcache_resp.bench.vllm_stack import command_calls, keyspace_hits, reset_stats, wait_for_keys
from lmcache_resp_servers import RedisServer
from lmcache_resp_testing.servers import redis_py
from vllm_helpers import CHUNK_TOKENS, adapter, chunk_bytes, phase, prompt

P1 = prompt(4 * CHUNK_TOKENS + 1, seed=1)
P4 = prompt(16 * CHUNK_TOKENS + 1, seed=4)
PROMPTS = {"p1": P1, "p4": P4}
CHUNKS = {"p1": 4, "p4": 16}
# Shares P4's first two chunks only (then unrelated tokens).
PARTIAL = P4[: 2 * CHUNK_TOKENS] + prompt(300, seed=99)
MAX_TOKENS = 8
# vLLM's CPU default of max_num_batched_tokens: the most prompt tokens one prefill step computes.
PREFILL_STEP_TOKENS = 2048
# bf16 rounding of the last token's hidden state moves a logprob by a few 1e-2 at most here.
LOGPROB_TOLERANCE = 0.05


def warm_up(p: Any, seed: int) -> None:
    """An unrelated prompt (shorter than a chunk: nothing stored, nothing looked up in Redis)
    first, so the timed prompts do not pay the engine's first forward pass."""
    p.run("warmup", prompt(CHUNK_TOKENS // 2, seed=1000 + seed), 2)


def reads(port: int) -> int:
    """Values read from the server since the last reset: GETs, or STRLENs for values read in
    GETRANGE pieces (one per value)."""
    calls = command_calls(port)
    return calls.get("get", 0) + calls.get("strlen", 0)


@pytest.fixture(scope="module")
def runs(redis: RedisServer, model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every phase's results, the counters of each warm one, in order (module-scoped: one engine
    start costs a minute or more on 2 cores)."""
    work = tmp_path_factory.mktemp("phases")
    out: dict[str, Any] = {}
    with phase(adapter("ours", redis), model, work,
               spec={"prefix_caching": True, "max_num_batched_tokens": PREFILL_STEP_TOKENS}) as p:
        out["cold-config"] = p.engine.ready
        warm_up(p, 0)
        for name, tokens in PROMPTS.items():
            p.run(name, tokens, MAX_TOKENS)
            p.run(f"{name}-reference", tokens, MAX_TOKENS)
        out["stored"] = wait_for_keys(redis.port, sum(CHUNKS.values()))
        out["cold"] = p.results
        out["engine-log"] = p.engine.log_path.read_text(errors="replace")
    for label in ("warm", "warm-again"):
        with phase(adapter("ours", redis), model, work) as p:
            warm_up(p, 1)
            reset_stats(redis.port)
            hits_before = keyspace_hits(redis.port)
            if label == "warm-again":
                p.run("partial", PARTIAL, MAX_TOKENS)
                out["partial-reads"] = reads(redis.port)
            for name, tokens in PROMPTS.items():
                before = reads(redis.port)
                p.run(name, tokens, MAX_TOKENS)
                out.setdefault(f"{label}-reads", {})[name] = reads(redis.port) - before
            out[f"{label}-hits"] = keyspace_hits(redis.port)[0] - hits_before[0]
            out[label] = p.results
            out[f"{label}-prefetch"] = p.prefetches()
    for kind in ("resp", "valkey"):
        with phase(adapter(kind, redis), model, work) as p:
            warm_up(p, 2)
            for name, tokens in PROMPTS.items():
                p.run(name, tokens, MAX_TOKENS)
            out[kind] = p.results
    negate_every_value(redis)
    with phase(adapter("ours", redis), model, work) as p:
        warm_up(p, 3)
        p.run("p1", P1, MAX_TOKENS)
        out["negated"] = p.results
    return out


def negate_every_value(redis: RedisServer) -> None:
    """Flips the sign bit of every bf16 element of every value (the KV negated), in place."""
    client = redis_py(redis)
    keys = client.keys("*")
    assert keys, "nothing stored to negate"
    for key in keys:
        value = bytearray(client.get(key))
        assert len(value) == chunk_bytes(), (key, len(value))
        view = memoryview(value).cast("H")
        for i in range(len(view)):
            view[i] ^= 0x8000
        client.set(key, bytes(value))


def test_the_engine_ran_with_the_rebind_fix(runs: dict[str, Any]) -> None:
    assert "vllm_rebind_fix: vLLM 0.32.0's _rebind_kernels replaced" in runs["engine-log"]


def test_the_cold_run_stored_every_full_chunk(runs: dict[str, Any], redis: RedisServer) -> None:
    assert runs["stored"] == sum(CHUNKS.values())
    for name in PROMPTS:
        assert runs["cold"][name]["num_cached_tokens"] == 0
        assert len(runs["cold"][name]["tokens"]) == MAX_TOKENS


@pytest.mark.parametrize("label", ["warm", "warm-again"])
def test_a_restarted_engine_reads_every_chunk_from_redis_and_none_from_l1(runs: dict[str, Any], label: str) -> None:
    for name in PROMPTS:
        # Every full chunk: the prompt but its last token, which the engine computes.
        assert runs[label][name]["num_cached_tokens"] == CHUNKS[name] * CHUNK_TOKENS
    prefetch = {line.request_id.split("-")[0]: line for line in runs[f"{label}-prefetch"]}
    for name in PROMPTS:
        line = prefetch[name]
        assert (line.hits, line.requested, line.l1, line.l2) == (CHUNKS[name], CHUNKS[name], 0, CHUNKS[name]), line
        # One read per chunk, counted by the server itself.
        assert runs[f"{label}-reads"][name] == CHUNKS[name]
    assert runs[f"{label}-hits"] >= sum(CHUNKS.values())


def test_the_first_token_and_its_logprobs_match_the_cold_run(runs: dict[str, Any]) -> None:
    for name in PROMPTS:
        cold, warm = runs["cold"][name], runs["warm"][name]
        assert warm["tokens"][0] == cold["tokens"][0], name
        assert warm["first_logprobs"].keys() == cold["first_logprobs"].keys(), name
        worst = max(abs(warm["first_logprobs"][t] - cold["first_logprobs"][t]) for t in cold["first_logprobs"])
        same = sum(a == b for a, b in zip(warm["tokens"], cold["tokens"]))
        # The evidence behind the module docstring, in the output of `scripts/test-vllm.sh -s`.
        print(f"{name}: first-token top-5 logprobs, warm vs cold: max |diff| {worst:.4f}; tokens equal to the "
              f"cold run's: {same} of {len(cold['tokens'])} (cold {cold['tokens']}, warm {warm['tokens']})")
        assert worst <= LOGPROB_TOLERANCE, (name, worst)


def test_every_token_matches_the_engine_computing_the_same_last_token(runs: dict[str, Any]) -> None:
    for name in PROMPTS:
        reference = runs["cold"][f"{name}-reference"]
        assert reference["num_cached_tokens"] == CHUNKS[name] * CHUNK_TOKENS  # vLLM's own cache, same split
        warm = runs["warm"][name]
        assert warm["tokens"] == reference["tokens"], name
        assert warm["first_logprobs"] == reference["first_logprobs"], name


def test_every_token_matches_the_cold_run_where_it_computed_the_last_token_alone(runs: dict[str, Any]) -> None:
    """The cause removed: P4 has 2 x 2048 + 1 tokens, and vLLM's CPU prefill takes at most 2048
    tokens a step (``max_num_batched_tokens``, pinned in the cold phase), so the cold run also
    computes P4's last token on its own, over the KV of the 4096 before it: the same arithmetic
    as the warm run, which then gives the cold run's tokens and logprobs bit for bit. (P1's cold
    run computes its last token inside the 1025-token pass; there only the first token is gated.)"""
    cold, warm = runs["cold"]["p4"], runs["warm"]["p4"]
    assert runs["cold-config"]["max_num_batched_tokens"] == PREFILL_STEP_TOKENS
    assert len(P4) == 2 * PREFILL_STEP_TOKENS + 1
    assert warm["tokens"] == cold["tokens"]
    assert warm["first_logprobs"] == cold["first_logprobs"]


def test_warm_runs_match_each_other(runs: dict[str, Any]) -> None:
    for name in PROMPTS:
        assert runs["warm-again"][name]["tokens"] == runs["warm"][name]["tokens"]
        assert runs["warm-again"][name]["first_logprobs"] == runs["warm"][name]["first_logprobs"]


def test_a_prompt_sharing_part_of_a_prefix_reuses_exactly_that_part(runs: dict[str, Any]) -> None:
    assert runs["warm-again"]["partial"]["num_cached_tokens"] == 2 * CHUNK_TOKENS
    assert runs["partial-reads"] == 2


@pytest.mark.parametrize("kind", ["resp", "valkey"])
def test_lmcache_s_own_adapters_give_the_same_tokens(runs: dict[str, Any], kind: str) -> None:
    for name in PROMPTS:
        theirs, ours = runs[kind][name], runs["warm"][name]
        assert theirs["num_cached_tokens"] == ours["num_cached_tokens"], (kind, name)
        assert theirs["tokens"] == ours["tokens"], (kind, name)
        assert theirs["first_logprobs"] == ours["first_logprobs"], (kind, name)


def test_negated_kv_changes_the_output(runs: dict[str, Any]) -> None:
    negated, warm = runs["negated"]["p1"], runs["warm"]["p1"]
    assert negated["num_cached_tokens"] == CHUNKS["p1"] * CHUNK_TOKENS  # it was served, negated
    changed_logprob = any(not math.isclose(negated["first_logprobs"].get(t, -math.inf), lp, abs_tol=1e-3)
                          for t, lp in warm["first_logprobs"].items())
    assert negated["tokens"] != warm["tokens"] or changed_logprob
