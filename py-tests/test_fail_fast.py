"""A dead server costs a batch milliseconds, not the timeout (docs/reliability.md, "A dead server
fails fast"): once a failed connect has marked it down, every key bound for it fails at once with
RespConnectionError naming it; a background probe notices it is back, so no caller waits on it.

Each front runs the same three steps against a real redis-server: detection (the first batch
after the kill: today's bounded retries), then batches that must fail in under 100 ms, then a
restart on the same port after which calls stay fast until one succeeds, byte for byte.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from conftest import LMCacheLikeDriver, BridgeProcess, RedisServer, lmcache_pool, pattern
from lmcache_resp import (
    AuthenticationError,
    BatchError,
    PagedRespStore,
    RedisClient,
    RespConnectionError,
    RespConnector,
    RespSettings,
)
from lmcache_resp_testing.servers import redis_py

PAGE = 64 * 1024
KEYS = [f"ff-{i}" for i in range(100)]
TIMEOUT = 5.0
FAST = 0.1  # the bound for a batch after detection
RECOVERY = 5.0  # the probe backs off up to 1 s between tries; the server takes a moment to listen


def elapsed(call: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    try:
        result: object = call()
    except Exception as exc:  # noqa: BLE001 - the test inspects what came back
        result = exc
    return time.perf_counter() - start, result


def assert_all_down(result: object, server: RedisServer, count: int) -> None:
    assert isinstance(result, BatchError), result
    assert len(result.errors) == count, result
    assert_down(result, server)


def assert_down(result: BatchError, server: RedisServer) -> None:
    """Every key that failed failed as bound for a server known to be down."""
    for err in result.errors.values():
        assert isinstance(err, RespConnectionError), err
        assert f"127.0.0.1:{server.port} is down since " in str(err), err


class Front:
    """One front as the test drives it: a batch of each kind over `keys`, and a check of values."""

    def __init__(
        self, keys: list[str], put: Callable[[], object], exists: Callable[[], object], verify: Callable[[], None]
    ) -> None:
        self.keys, self.put, self.exists, self.verify = keys, put, exists, verify


def store_front(store: PagedRespStore, keys: list[str] = KEYS) -> Front:
    pages = store.allocate_many(len(keys))
    for i, page in enumerate(pages):
        page.byte_array[:] = pattern(PAGE, i)

    def verify() -> None:
        out = store.allocate_many(len(keys))
        try:
            assert store.get(keys, out) == [True] * len(keys)
            assert all(bytes(p.byte_array) == pattern(PAGE, i) for i, p in enumerate(out))
        finally:
            for page in out:
                store.free(page)

    return Front(keys, lambda: store.put(keys, pages), lambda: store.exists(keys), verify)


def connector_front(connector: RespConnector) -> Front:
    driver = LMCacheLikeDriver(connector)
    _pool, views = lmcache_pool([PAGE] * len(KEYS))
    for i, view in enumerate(views):
        view[:] = pattern(PAGE, i)

    def run(fid: int) -> object:
        _, ok, error, bits = driver.wait(fid, timeout=2 * TIMEOUT)
        if not ok:
            # The connector reports one error per batch; make it look like the store's.
            raise BatchError(error, [RespConnectionError(error)] * len(KEYS))
        return bits

    def verify() -> None:
        _pool2, outs = lmcache_pool([PAGE] * len(KEYS))
        assert run(connector.submit_batch_get(KEYS, outs)) == [True] * len(KEYS)
        assert all(bytes(out) == pattern(PAGE, i) for i, out in enumerate(outs))

    return Front(KEYS, lambda: run(connector.submit_batch_set(KEYS, views)), lambda: run(connector.submit_batch_exists(KEYS)), verify)


def client_front(client: RedisClient) -> Front:
    """RedisClient takes one key per call: a "batch" is 100 calls, failing on the first."""
    values = [bytearray(pattern(4096, i)) for i in range(len(KEYS))]

    def each(call: Callable[[str, bytearray], object]) -> object:
        errors = []
        for key, value in zip(KEYS, values):
            try:
                call(key, value)
            except RespConnectionError as exc:
                errors.append(exc)
        if errors:
            raise BatchError("client calls failed", errors)
        return None

    def verify() -> None:
        for i, key in enumerate(KEYS):
            out = bytearray(4096)
            assert client.get(key, out) == 4096
            assert out == pattern(4096, i)

    return Front(KEYS, lambda: each(client.set), lambda: each(lambda k, _v: client.exists(k)), verify)


def fail_fast_then_recover(server: RedisServer, front: Front) -> None:
    front.put()
    front.verify()
    server.kill()
    # Detection: the first batch finds the server gone within today's bounded retries.
    took, result = elapsed(front.exists)
    assert isinstance(result, BatchError), result
    assert took < TIMEOUT / 2, f"detection took {took:.3f} s"
    # From now on every batch fails at once, naming the server and since when.
    for call in (front.exists, front.put) * 3:
        took, result = elapsed(call)
        assert_all_down(result, server, len(front.keys))
        assert took < FAST, f"a batch against a known-dead server took {took * 1000:.1f} ms"
    # Back on the same port (empty): the probe notices; no call meanwhile is slow.
    server.restart()
    deadline = time.monotonic() + RECOVERY
    while True:
        took, result = elapsed(front.put)
        if not isinstance(result, BaseException):
            # The first batch to reach the server again reconnects on the way: bounded by the
            # operation timeout, not by the fail-fast bound.
            assert took < TIMEOUT / 2, f"the first batch after the restart took {took:.3f} s"
            break
        assert isinstance(result, BatchError), result
        assert_down(result, server)
        if len(result.errors) == len(front.keys):
            assert took < FAST, f"a call while the probe was at work took {took * 1000:.1f} ms: {result}"
        else:
            # The probe found the server back in the middle of this batch (RedisClient's batch
            # is 100 calls, one after another): the keys before failed fast, the rest reached it.
            assert took < TIMEOUT / 2, f"a batch that met the server's return took {took:.3f} s"
        assert time.monotonic() < deadline, "the server never came back"
        time.sleep(0.02)
    front.verify()


@pytest.fixture
def store(redis_server: RedisServer) -> Iterator[PagedRespStore]:
    with PagedRespStore(redis_server.url, page_size=PAGE, num_pages=300, num_workers=2, timeout=TIMEOUT) as s:
        yield s


def test_the_store_fails_fast_on_a_dead_server_and_recovers_by_itself(redis_server: RedisServer, store: PagedRespStore) -> None:
    fail_fast_then_recover(redis_server, store_front(store))


def test_the_connector_fails_fast_on_a_dead_server_and_recovers_by_itself(redis_server: RedisServer) -> None:
    connector = RespConnector(url=redis_server.url, num_workers=2, timeout=TIMEOUT)
    try:
        fail_fast_then_recover(redis_server, connector_front(connector))
    finally:
        connector.close()


def test_the_client_fails_fast_on_a_dead_server_and_recovers_by_itself(redis_server: RedisServer) -> None:
    with RedisClient(url=redis_server.url, timeout=TIMEOUT) as client:
        fail_fast_then_recover(redis_server, client_front(client))


def test_a_bridged_store_fails_fast_on_a_dead_server_and_recovers_by_itself(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    bridge = BridgeProcess(redis_server.url, tmp_path / "bridge.sock", "--timeout", str(TIMEOUT))
    try:
        with PagedRespStore.attach(str(bridge.socket)) as store:
            # The bridge's pool (conftest: 64 pages) holds two copies of 16 keys' values.
            fail_fast_then_recover(redis_server, store_front(store, KEYS[:16]))
    finally:
        bridge.stop()


def test_one_dead_shard_of_three_fails_only_its_keys(tmp_path: Path) -> None:
    servers = [RedisServer(tmp_path / f"shard{i}") for i in range(3)]
    try:
        url = "redis://" + ",".join(f"127.0.0.1:{s.port}" for s in servers)
        with PagedRespStore(url, page_size=PAGE, num_pages=300, num_workers=2, timeout=TIMEOUT) as store:
            front = store_front(store)
            front.put()
            on = [int(redis_py(s).dbsize()) for s in servers]
            assert sum(on) == len(KEYS) and all(on), on
            dead = servers[1]
            dead_keys = {k for k in KEYS if redis_py(dead).exists(k)}
            dead.kill()
            for round_ in range(4):
                took, result = elapsed(lambda: store.exists(KEYS))
                assert isinstance(result, BatchError), result
                failed = {KEYS[i] for i in result.errors}
                assert failed == dead_keys, f"round {round_}: only the dead shard's keys fail"
                assert all(r is True for i, r in enumerate(result.results) if i not in result.errors)
                if round_ > 0:
                    assert took < FAST, f"{took * 1000:.1f} ms"
                    assert all(f"127.0.0.1:{dead.port} is down since" in str(e) for e in result.errors.values())
    finally:
        for server in servers:
            server.kill()


class BlackHole:
    """A port that takes no connections and refuses none: a listener whose accept queue is full,
    so the kernel drops every further SYN, as a host gone from the network does."""

    def __init__(self, port: int) -> None:
        import socket

        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", port))
        self.listener.listen(0)
        self.fillers = []
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            self.fillers.append(filler)
        time.sleep(0.05)

    def close(self) -> None:
        for filler in self.fillers:
            filler.close()
        self.listener.close()


def test_a_black_holed_server_costs_one_connect_timeout_then_batches_fail_fast(redis_server: RedisServer) -> None:
    connect_timeout = 0.5
    with PagedRespStore(
        redis_server.url, page_size=PAGE, num_pages=300, num_workers=2, timeout=TIMEOUT, connect_timeout=connect_timeout
    ) as store:
        front = store_front(store)
        front.put()
        port = redis_server.port
        redis_server.kill()
        hole = BlackHole(port)
        try:
            took, result = elapsed(front.exists)
            assert isinstance(result, BatchError), result
            # Each connection's first attempt waits out the connect timeout, once.
            assert connect_timeout * 0.9 <= took < TIMEOUT, f"detection took {took:.3f} s"
            assert "timed out" in str(result), result
            for _ in range(3):
                took, result = elapsed(front.exists)
                assert_all_down(result, redis_server, len(KEYS))
                assert "connect timed out" in str(next(iter(result.errors.values())))
                assert took < FAST, f"{took * 1000:.1f} ms, where each batch would wait {connect_timeout} s again"
        finally:
            hole.close()
        redis_server.restart()
        deadline = time.monotonic() + RECOVERY
        while isinstance(elapsed(front.put)[1], BaseException):
            assert time.monotonic() < deadline, "the server never came back"
            time.sleep(0.05)
        front.verify()


def test_stats_and_prometheus_show_a_down_endpoint_until_it_is_back(redis_server: RedisServer, store: PagedRespStore) -> None:
    from lmcache_resp import metrics

    name = f"127.0.0.1:{redis_server.port}"
    front = store_front(store)
    front.put()

    def up_gauge() -> float:
        families = {f.name: f for f in metrics.collect()}
        samples = [s for s in families["lmcache_resp_endpoint_up"].samples if s[1].get("endpoint") == name]
        assert len(samples) == 1, samples
        return float(samples[0][2])

    assert store.stats().endpoints[name].down is False
    assert up_gauge() == 1
    redis_server.kill()
    assert isinstance(elapsed(front.exists)[1], BatchError)
    assert store.stats().endpoints[name].down is True
    assert up_gauge() == 0
    redis_server.restart()
    deadline = time.monotonic() + RECOVERY
    while store.stats().endpoints[name].down:
        assert time.monotonic() < deadline, "the probe never marked it up"
        time.sleep(0.02)
    assert up_gauge() == 1


# -- starting without the server (require_server_at_start=false) ----------------------------


def test_a_store_that_may_start_without_its_server_starts_fails_fast_and_serves_once_it_is_up(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    # An engine must not refuse to serve because its cache tier is down: with
    # require_server_at_start=false the store starts (one WARNING saying so), its batches fail
    # at once naming the server, and once the server is up (on the same port) they succeed.
    redis_server.kill()
    caplog.set_level(logging.WARNING, logger="lmcache_resp")
    took, store = elapsed(lambda: PagedRespStore(
        redis_server.url, page_size=PAGE, num_pages=300, num_workers=2, timeout=TIMEOUT, require_server_at_start=False
    ))
    assert isinstance(store, PagedRespStore), store
    assert took < TIMEOUT, f"starting without the server took {took:.3f} s"
    try:
        time.sleep(0.3)  # the core's log queue drains into logging
        said = [r.getMessage() for r in caplog.records if "starting without the server" in r.getMessage()]
        assert len(said) == 1 and f"127.0.0.1:{redis_server.port}" in said[0], said
        assert "require_server_at_start=false" in said[0], said
        front = store_front(store)
        for call in (front.exists, front.put):
            took, result = elapsed(call)
            assert_all_down(result, redis_server, len(front.keys))
            assert took < FAST, f"a batch while the server was down took {took * 1000:.1f} ms"
        redis_server.restart()
        deadline = time.monotonic() + RECOVERY
        while isinstance(elapsed(front.put)[1], BaseException):
            assert time.monotonic() < deadline, "the store never reached the server once it was up"
            time.sleep(0.05)
        front.verify()
    finally:
        store.close()


def test_the_setting_defaults_to_required_for_a_store_and_not_for_an_engines_adapter(redis_server: RedisServer) -> None:
    redis_server.kill()
    with pytest.raises(RespConnectionError, match=f"127.0.0.1:{redis_server.port}"):
        PagedRespStore(redis_server.url, page_size=PAGE, num_pages=4, num_workers=1, timeout=TIMEOUT)
    # LMCache's, SGLang's and vLLM's adapters read their settings as adapter params: there it is
    # false unless the params, the URL or LMCACHE_RESP_REQUIRE_SERVER_AT_START say otherwise.
    params = {"host": "127.0.0.1", "port": redis_server.port, "num_workers": 1, "timeout": TIMEOUT}
    assert RespSettings.from_adapter_params(params, env={}).require_server_at_start is False
    assert RespSettings.from_sglang({"interface_v1": 1, **params}, env={}).require_server_at_start is False
    assert RespSettings.from_vllm({"type": "RespSecondaryTierManager", **params}, env={}).require_server_at_start is False
    assert RespSettings.from_adapter_params({**params, "require_server_at_start": True}, env={}).require_server_at_start
    env = {"LMCACHE_RESP_REQUIRE_SERVER_AT_START": "true"}
    assert RespSettings.from_adapter_params(params, env=env).require_server_at_start
    url = f"redis://127.0.0.1:{redis_server.port}?require_server_at_start=true"
    assert RespSettings.from_adapter_params({"url": url}, env={}).require_server_at_start
    assert RespSettings.resolve(redis_server.url, env={}).require_server_at_start
    # LMCache's MP server builds the connector from its adapter params: it starts.
    connector = RespConnector(**params)
    try:
        ran = connector.submit_batch_exists(KEYS[:4])
        assert isinstance(ran, int)
    finally:
        connector.close()


def test_a_wrong_password_fails_the_start_even_where_the_server_may_be_down(tmp_path: Path) -> None:
    # Starting without the server covers a server that cannot be reached, not one that refuses
    # this client: no wait would mend a wrong password.
    with RedisServer(tmp_path, password="right-pw") as server:
        with pytest.raises(AuthenticationError):
            PagedRespStore(f"redis://:wrong-pw@127.0.0.1:{server.port}", page_size=PAGE, num_pages=4,
                           num_workers=1, timeout=TIMEOUT, require_server_at_start=False)
