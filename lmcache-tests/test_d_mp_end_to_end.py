"""(d) MP mode end to end: a real `lmcache server` with our native_plugin L2 adapter (directly,
and through a bridge), driven by LMCache's own LMCacheMPSchedulerAdapter and
LMCacheMPWorkerAdapter on CPU tensors, the way vLLM drives them (LMCache 0.5.6 takes vLLM's token
IDs as a list, 0.5.7 packed: ``as_vllm_sends``).

Each test starts `python -m lmcache.cli.main server ... --supported-transfer-mode engine_driven`
(a CPU-only host has no lmcache_driven transfer: without it KV registration is never answered)
with the adapter JSON of examples/lmcache/mp-l2-adapter.json (or examples/bridge/), registers
paged KV caches (bf16, [2, blocks, block size, heads, head size] per layer) with the worker
adapter, stores chunks whose every block holds its own pattern, waits until LMCache's store
controller has written them to Redis, clears L1 (the scheduler adapter's reset_cache: CLEAR of
unlocked L1 objects), looks the tokens up (the lookup prefetches from L2, our connector) and
retrieves them into other blocks of zeroed caches, and compares every byte.

Then the faults: Redis killed while a lookup's L2 reads are in flight (bounded time; each block
either holds the right bytes or is reported for recompute, never wrong bytes), Redis restarted
on the same port (a later store and retrieve work, the lmcache server untouched), and a wrong
password (a clear refusal naming authentication in the server's output, within seconds).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
import zmq

from lmc_helpers import (
    ADAPTER_CREATED,
    RedisServer,
    bridge_example,
    free_port,
    load_mp_example,
    stop_process_group,
)

from lmcache.integration.vllm.vllm_multi_process_adapter import (
    LMCacheMPSchedulerAdapter,
    LMCacheMPWorkerAdapter,
    LoadStoreOp,
    ParallelStrategy,
)
from lmcache_resp_testing.certs import make_test_certs
from lmcache_resp_testing.servers import pause, redis_py

try:
    # LMCache 0.5.7: vLLM's side hands token IDs over packed (big-endian uint32), as its
    # lmcache_mp_metadata.py packs them; 0.5.6 takes the list.
    from lmcache.v1.multiprocess.token_codec import pack_token_ids
except ImportError:
    pack_token_ids = None


def as_vllm_sends(tokens: list[int]) -> Any:
    """The token IDs as this LMCache's adapters take them from vLLM."""
    return tokens if pack_token_ids is None else pack_token_ids(tokens)


def load_store_op(tokens: list[int], blocks: list[int]) -> LoadStoreOp:
    """One load or store of ``tokens`` in ``blocks`` (one engine KV cache group)."""
    if pack_token_ids is None:
        return LoadStoreOp(token_ids=tokens, block_ids=[blocks], start=0, end=len(tokens))
    return LoadStoreOp(token_bytes=pack_token_ids(tokens), block_ids=[blocks], start=0, end=len(tokens))


MODEL = "lmcache-resp/e2e-model"
CHUNK_TOKENS = 16  # --chunk-size, and vLLM's block size here: one block per chunk
LAYERS, BLOCKS, HEADS, HEAD_SIZE = 4, 32, 4, 32  # one chunk: 4 x 2 x 16 x 4 x 32 x 2 B = 64 KiB
CHUNKS = 8
ADAPTER_TIMEOUT_S = 4.0  # adapter_params.timeout in these tests
SERVER_START_S = 180.0
MQ_TIMEOUT_S = 30.0


# -- the lmcache server ------------------------------------------------------------------------


class MPServer:
    def __init__(self, process: subprocess.Popen[bytes], log_path: Path, port: int) -> None:
        self.process, self.log_path, self.port = process, log_path, port

    @property
    def url(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float = SERVER_START_S) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.output():
            assert self.process.poll() is None, f"the lmcache server exited:\n{self.output()[-4000:]}"
            assert time.monotonic() < deadline, f"{text!r} not in the server's output within {timeout:g} s"
            time.sleep(0.2)


@contextmanager
def lmcache_server(adapter: dict[str, Any], tmp_path: Path, env: dict[str, str] | None = None,
                   wait: bool = True) -> Iterator[MPServer]:
    ports = [free_port() for _ in range(3)]
    log_path = tmp_path / f"lmcache-server-{ports[0]}.log"
    command = [
        sys.executable, "-m", "lmcache.cli.main", "server", "--l1-size-gb", "0.2", "--eviction-policy", "LRU",
        "--chunk-size", str(CHUNK_TOKENS), "--port", str(ports[0]), "--http-port", str(ports[1]),
        "--prometheus-port", str(ports[2]), "--supported-transfer-mode", "engine_driven",
        "--l2-adapter", json.dumps(adapter),
    ]
    full_env = {**os.environ, "LMCACHE_TRACK_USAGE": "false", "LMCACHE_DISABLE_BANNER": "1", **(env or {})}
    with open(log_path, "wb") as log:
        # cwd: not the repository, whose source tree would shadow the installed lmcache_resp
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=full_env, cwd=tmp_path,
                                   start_new_session=True)
    server = MPServer(process, log_path, ports[0])
    try:
        if wait:
            server.wait_for(ADAPTER_CREATED)
        yield server
    finally:
        stop_process_group(process)


def direct_adapter(redis: RedisServer) -> dict[str, Any]:
    _, document = load_mp_example(redis.port)
    assert document["adapter_params"]["timeout"] == 2  # the example's; longer here, so that a bound
    document["adapter_params"]["timeout"] = ADAPTER_TIMEOUT_S  # well under it is measurable
    return document


@contextmanager
def bridge_adapter(redis: RedisServer, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """examples/bridge/mp-l2-adapter-bridge.json, its socket a running bridge's."""
    with bridge_example(redis.port, tmp_path, num_pages=64, extra=("--timeout", str(ADAPTER_TIMEOUT_S))) as document:
        yield document


# -- LMCache's vLLM-side adapters on CPU tensors -----------------------------------------------


def block_pattern(layer: int, block: int, seed: int) -> torch.Tensor:
    """One block of one layer: random bf16 bits, never NaN/Inf (exponent's top bit cleared)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + layer * 1009 + block)
    bits = torch.randint(-(1 << 15), 1 << 15, (2, CHUNK_TOKENS, HEADS, HEAD_SIZE), generator=g, dtype=torch.int32)
    return (bits & ~0x4000).to(torch.int16).view(torch.bfloat16)


class Engine:
    """What vLLM's LMCache MP connector holds: a scheduler adapter and one worker adapter
    (TP 1) with registered paged KV caches."""

    def __init__(self, server: MPServer) -> None:
        self.context = zmq.Context()
        strategy = ParallelStrategy(mla_only=False, vllm_world_size=1, vllm_worker_id=0, tp_size=1, pp_size=1,
                                    n_servers=1)
        self.scheduler = LMCacheMPSchedulerAdapter([server.url], self.context, MODEL, CHUNK_TOKENS, strategy,
                                                   mq_timeout=MQ_TIMEOUT_S)
        self.worker = LMCacheMPWorkerAdapter(server.url, self.context, MODEL, CHUNK_TOKENS, strategy,
                                             mq_timeout=MQ_TIMEOUT_S)
        self.kv = {f"model.layers.{i}.self_attn": torch.zeros((2, BLOCKS, CHUNK_TOKENS, HEADS, HEAD_SIZE),
                                                             dtype=torch.bfloat16) for i in range(LAYERS)}
        self.worker.register_kv_caches(self.kv)
        self._requests = 0

    def close(self) -> None:
        self.worker.shutdown()
        self.scheduler.shutdown()
        self.context.term()

    def request_id(self) -> str:
        self._requests += 1
        return f"req-{self._requests}"

    def fill(self, blocks: list[int], seed: int) -> None:
        for layer, tensor in enumerate(self.kv.values()):
            for i, block in enumerate(blocks):
                tensor[:, block] = block_pattern(layer, i, seed)

    def zero(self) -> None:
        for tensor in self.kv.values():
            tensor.zero_()

    def block_matches(self, block: int, chunk: int, seed: int) -> bool:
        return all(torch.equal(t[:, block].view(torch.int16), block_pattern(layer, chunk, seed).view(torch.int16))
                   for layer, t in enumerate(self.kv.values()))

    def block_is_zero(self, block: int) -> bool:
        return all(not t[:, block].view(torch.int16).any() for t in self.kv.values())

    def store(self, tokens: list[int], blocks: list[int], timeout: float = 60) -> None:
        request = self.request_id()
        self.worker.submit_store_request(request, load_store_op(tokens, blocks), None)
        deadline = time.monotonic() + timeout
        while True:
            stores, _ = self.worker.get_finished({request})
            if stores and request in stores:
                return
            assert time.monotonic() < deadline, "the store did not finish"
            time.sleep(0.02)

    def lookup(self, tokens: list[int], timeout: float = 60) -> tuple[str, int]:
        """(request id, tokens hit), as vLLM's scheduler asks before admitting a request."""
        request = self.request_id()
        self.scheduler.maybe_submit_lookup_request(request, as_vllm_sends(tokens))
        deadline = time.monotonic() + timeout
        while (hit := self.scheduler.check_lookup_result(request)) is None:
            assert time.monotonic() < deadline, "the lookup did not finish"
            time.sleep(0.005)
        return request, hit

    def retrieve(self, request: str, tokens: list[int], blocks: list[int], timeout: float = 60) -> set[int]:
        """Loads tokens into blocks; returns the blocks reported for recompute."""
        self.worker.submit_retrieve_request(request, load_store_op(tokens, blocks), None)
        deadline = time.monotonic() + timeout
        while True:
            _, retrieves = self.worker.get_finished(set())
            if retrieves and request in retrieves:
                break
            assert time.monotonic() < deadline, "the retrieve did not finish"
            time.sleep(0.005)
        errors = self.worker.get_block_ids_with_load_errors()
        self.scheduler.cleanup_lookup_result(request)
        self.scheduler.end_session(request)
        return errors

    def clear_l1(self) -> None:
        assert self.scheduler.reset_cache()


def tokens_for(chunks: int, base: int) -> list[int]:
    return list(range(base, base + chunks * CHUNK_TOKENS))


def wait_for_keys(redis: RedisServer, count: int, timeout: float = 30) -> list[bytes]:
    """LMCache writes L1 to L2 in the background: until Redis holds ``count`` keys of the model."""
    client = redis_py(redis)
    deadline = time.monotonic() + timeout
    while len(keys := client.keys(f"{MODEL}@*")) < count:
        assert time.monotonic() < deadline, f"Redis holds {len(keys)} of {count} chunks after {timeout:g} s"
        time.sleep(0.05)
    return keys


def reads(redis: RedisServer) -> int:
    stats = redis_py(redis).info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("get", "getrange"))


def round_trip(engine: Engine, redis: RedisServer, *, base: int, seed: int, existing: int = 0) -> None:
    """Stores CHUNKS chunks from blocks 0..CHUNKS-1, clears L1, looks up and retrieves them into
    blocks CHUNKS..2*CHUNKS-1 of zeroed caches: every byte checked."""
    tokens = tokens_for(CHUNKS, base)
    source = list(range(CHUNKS))
    target = list(range(CHUNKS, 2 * CHUNKS))
    engine.zero()
    engine.fill(source, seed)
    engine.store(tokens, source)
    keys = wait_for_keys(redis, existing + CHUNKS)
    chunk_bytes = LAYERS * 2 * CHUNK_TOKENS * HEADS * HEAD_SIZE * 2
    assert {redis_py(redis).strlen(k) for k in keys} == {chunk_bytes}  # raw KV bytes, no header
    engine.clear_l1()
    engine.zero()
    before = reads(redis)
    request, hit = engine.lookup(tokens)
    assert hit == len(tokens)
    assert reads(redis) - before >= CHUNKS  # the hits came from L2 (L1 was cleared)
    assert engine.retrieve(request, tokens, target) == set()
    for chunk, block in enumerate(target):
        assert engine.block_matches(block, chunk, seed), f"chunk {chunk} differs after the retrieve"
    assert all(engine.block_is_zero(b) for b in source)  # nothing written where nothing was asked


# -- the tests ---------------------------------------------------------------------------------


def test_mp_server_stores_clears_l1_and_retrieves_every_byte_from_redis(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    with lmcache_server(direct_adapter(redis_server), tmp_path) as server:
        engine = Engine(server)
        try:
            round_trip(engine, redis_server, base=1000, seed=1)
            # A second request sharing the first 4 chunks' prefix: only the new chunks are written.
            round_trip(engine, redis_server, base=50_000, seed=2, existing=CHUNKS)
        finally:
            engine.close()


def test_mp_server_through_the_bridge_retrieves_every_byte(redis_server: RedisServer, tmp_path: Path) -> None:
    with bridge_adapter(redis_server, tmp_path) as adapter, lmcache_server(adapter, tmp_path) as server:
        engine = Engine(server)
        try:
            round_trip(engine, redis_server, base=2000, seed=3)
        finally:
            engine.close()


def test_the_servers_output_has_our_settings_line_with_the_password_masked(
    secure_server: RedisServer, tmp_path: Path
) -> None:
    """Depends on the Rust core's and the connector's log lines reaching Python logging under
    lmcache_resp.* (issue #19), where LMCache's server shows INFO."""
    assert secure_server.password is not None
    env = {"LMCACHE_RESP_PASSWORD": secure_server.password}
    with lmcache_server(direct_adapter(secure_server), tmp_path, env=env) as server:
        engine = Engine(server)  # the adapter is in use, not just built
        engine.close()
        output = server.output()
    assert secure_server.password not in output
    line = next((l for l in output.splitlines() if "RespConnector: settings {" in l), None)
    assert line is not None, f"no 'RespConnector: settings' line in the server's output:\n{output[-3000:]}"
    assert "INFO" in line
    assert "'password': '***'" in line or '"password": "***"' in line, line
    assert f"'port': {secure_server.port}" in line or f'"port": {secure_server.port}' in line, line


def test_redis_killed_mid_retrieve_then_restarted(redis_server: RedisServer, tmp_path: Path) -> None:
    """Redis frozen (SIGSTOP) so that the lookup's L2 reads are in flight, then killed: the lookup
    ends in bounded time, and each block the retrieve did not report for recompute holds exactly
    its bytes. Redis restarted on the same port (empty): the same lmcache server stores and
    retrieves again."""
    with lmcache_server(direct_adapter(redis_server), tmp_path) as server:
        engine = Engine(server)
        try:
            tokens = tokens_for(CHUNKS, 3000)
            source, target = list(range(CHUNKS)), list(range(CHUNKS, 2 * CHUNKS))
            engine.fill(source, 4)
            engine.store(tokens, source)
            wait_for_keys(redis_server, CHUNKS)
            engine.clear_l1()
            engine.zero()

            pause(redis_server)
            request = engine.request_id()
            engine.scheduler.maybe_submit_lookup_request(request, as_vllm_sends(tokens))
            time.sleep(0.5)  # the lookup's EXISTS/GETs are now on the wire, unanswered
            killed = time.monotonic()
            redis_server.kill()  # SIGKILL of a stopped process: connections reset
            while (hit := engine.scheduler.check_lookup_result(request)) is None:
                assert time.monotonic() - killed < 3 * ADAPTER_TIMEOUT_S, "the lookup hangs after the kill"
                time.sleep(0.005)
            took = time.monotonic() - killed
            print(f"lookup ended {took * 1e3:.0f} ms after the kill ({hit} of {len(tokens)} tokens hit)")
            # Fail fast (docs/reliability.md): a dead endpoint fails in-flight work at once,
            # not after the timeout.
            assert took < ADAPTER_TIMEOUT_S / 2, f"the lookup took {took:.2f} s after the kill (timeout {ADAPTER_TIMEOUT_S:g} s)"
            assert hit % CHUNK_TOKENS == 0 and 0 <= hit <= len(tokens)
            # vLLM retrieves what the lookup reported; the rest it recomputes.
            hit_chunks = hit // CHUNK_TOKENS
            if hit_chunks:
                errors = engine.retrieve(request, tokens[:hit], target[:hit_chunks])
                for chunk in range(hit_chunks):
                    block = target[chunk]
                    assert block in errors or engine.block_matches(block, chunk, 4), f"chunk {chunk}: wrong bytes"
            else:
                engine.scheduler.cleanup_lookup_result(request)
                engine.scheduler.end_session(request)
            for block in target[hit_chunks:]:
                assert engine.block_is_zero(block)  # not asked for: untouched

            # Recovery: Redis back on the same port, empty; the lmcache server is not restarted.
            redis_server.restart()
            deadline = time.monotonic() + 60
            while True:
                try:
                    round_trip(engine, redis_server, base=90_000 + int((deadline - time.monotonic()) * 1000),
                               seed=5)
                    break
                except AssertionError:
                    # The first store after the restart may still meet the connector reconnecting;
                    # a later one must work.
                    if time.monotonic() > deadline:
                        raise
                    redis_py(redis_server).flushall()
                    time.sleep(1)
        finally:
            engine.close()


def test_a_wrong_password_is_a_clear_refusal_not_a_hang(secure_server: RedisServer, tmp_path: Path) -> None:
    wrong = "not-the-password-4c1d"
    started = time.monotonic()
    with lmcache_server(direct_adapter(secure_server), tmp_path, env={"LMCACHE_RESP_PASSWORD": wrong},
                        wait=False) as server:
        deadline = started + 90
        while True:
            output = server.output()
            if "AuthenticationError" in output or server.process.poll() is not None:
                break
            assert time.monotonic() < deadline, f"no refusal within 90 s:\n{output[-3000:]}"
            time.sleep(0.2)
        took = time.monotonic() - started
        # A server without its L2 adapter does not carry on: it exits, with an error.
        try:
            status = server.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            status = None
        output = server.output()
    refusal = f"lmcache_resp.errors.AuthenticationError: authentication failed at 127.0.0.1:{secure_server.port}"
    assert refusal in output, output[-3000:]
    assert status not in (None, 0), f"the server is still running or exited 0 (status {status})"
    assert wrong not in output  # the password is never shown
    assert ADAPTER_CREATED not in output
    print(f"refused after {took:.1f} s (including the server's start)")
    assert took < 60


def test_mp_server_over_mutual_tls_retrieves_every_byte(tmp_path: Path) -> None:
    """LMCache's server with our adapter against a TLS-only redis-server that requires client
    certificates: the CA and the client's files in adapter_params under redis-py's names, every
    byte stored and retrieved over TLS, and the settings line shows the TLS paths, never a key."""
    server_dir = tmp_path / "redis-tls"
    with RedisServer(server_dir, tls=make_test_certs(server_dir / "certs"), tls_auth_clients="yes") as redis:
        assert redis.certs is not None
        document = direct_adapter(redis)
        params = document["adapter_params"]
        params.update(redis.tls_kwargs(client_cert=True))
        params["host"] = "127.0.0.1"
        with lmcache_server(document, tmp_path) as server:
            engine = Engine(server)
            try:
                round_trip(engine, redis, base=3000, seed=4)
            finally:
                engine.close()
            output = server.output()
        line = next((l for l in output.splitlines() if "RespConnector: settings {" in l), None)
        assert line is not None, output[-3000:]
        assert "'ssl': True" in line or '"ssl": true' in line, line
        assert str(redis.certs.client_key) in line, line  # the path, as given
        key_body = redis.certs.client_key.read_text().splitlines()[1]
        assert key_body not in output and "PRIVATE KEY" not in output
