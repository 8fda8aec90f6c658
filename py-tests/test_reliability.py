"""The trust boundary and the faults of issue #10, as a caller sees them: shared memory that
cannot steer the process, fork(), a worker that dies, secrets echoed by a server, views kept
after free, ambiguous batches, impossible sizes, and close() without the GIL."""

from __future__ import annotations

import asyncio
import mmap
import multiprocessing
import os
import time

import pytest
from conftest import RedisServer, ThreadTicks, pattern
from lmcache_resp_testing import hooks

from lmcache_resp import (
    AuthenticationError,
    EngineFailedError,
    ForkedError,
    InvalidInputError,
    PagedRespStore,
    PageError,
    RedisClient,
    RespConnector,
    RespError,
    RespSettings,
)
from lmcache_resp_testing.servers import pause, redis_py, resume


def store_for(server: RedisServer, **kwargs: object) -> PagedRespStore:
    options: dict[str, object] = {"page_size": 4096, "num_pages": 8, "num_workers": 2}
    options.update(kwargs)
    return PagedRespStore(f"resp://127.0.0.1:{server.port}", **options)  # type: ignore[arg-type]


# -- 1. shared memory ---------------------------------------------------------------------------


def test_garbage_written_over_the_whole_shared_arena_cannot_steer_the_store(redis_server: RedisServer) -> None:
    """Another process that maps the arena (here: this one, through /proc) can change page
    bytes, which is what sharing pages means, and nothing else: no ring, counter or address
    lives there for it to forge."""
    with store_for(redis_server) as store:
        pages = store.allocate_many(4)
        with open(f"/proc/{os.getpid()}/fd/{store.arena_fd}", "r+b") as arena:
            with mmap.mmap(arena.fileno(), store.arena_size) as shared:
                shared[:] = b"\xff" * store.arena_size
        keys = [f"k{i}" for i in range(4)]
        for i, page in enumerate(pages):
            page.write_bytes(pattern(4096, i))
        store.put(keys, pages)
        for page in pages:
            page.write_bytes(bytes(4096))
        assert store.get(keys, pages) == [True] * 4
        assert [bytes(page.byte_array) for page in pages] == [pattern(4096, i) for i in range(4)]
        assert redis_py(redis_server).get("k2") == pattern(4096, 2)


# -- 3. fork ----------------------------------------------------------------------------------------


def _child_uses(store: PagedRespStore, pages: list, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    outcomes = []
    for call in (lambda: store.put(["from-child"], pages[:1]), lambda: store.exists(["x"]), store.allocate):
        try:
            call()
            outcomes.append("no error")
        except ForkedError as exc:
            outcomes.append(f"ForkedError: {exc}")
        except BaseException as exc:  # noqa: BLE001 - the point is to report anything else
            outcomes.append(f"{type(exc).__name__}: {exc}")
    queue.put(outcomes)


def _child_exits(_store: PagedRespStore) -> None:
    pass


def test_a_forked_child_gets_a_clear_error_and_the_parent_is_unaffected(redis_server: RedisServer) -> None:
    fork = multiprocessing.get_context("fork")
    with store_for(redis_server) as store:
        pages = store.allocate_many(2)
        queue: multiprocessing.Queue = fork.Queue()  # type: ignore[type-arg]
        child = fork.Process(target=_child_uses, args=(store, pages, queue))
        child.start()
        outcomes = queue.get(timeout=30)
        child.join(30)
        assert child.exitcode == 0
        assert all(o.startswith("ForkedError: ") for o in outcomes), outcomes
        assert f"created by process {os.getpid()}" in outcomes[0]
        # A child that only exits must not disturb anything either.
        quiet = fork.Process(target=_child_exits, args=(store,))
        quiet.start()
        quiet.join(30)
        assert quiet.exitcode == 0
        # The parent carries on: nothing of the child's reached its rings or its server.
        pages[0].write_bytes(pattern(4096, 1))
        store.put(["parent"], pages[:1])
        assert store.get(["parent"], pages[1:]) == [True]
        assert bytes(pages[1].byte_array) == pattern(4096, 1)
        assert redis_py(redis_server).exists("from-child") == 0


def _client_in_child(client: RedisClient, queue: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    try:
        client.ping()
        queue.put("no error")
    except ForkedError:
        queue.put("ForkedError")


def test_a_forked_child_cannot_use_the_parents_client_connection(redis_server: RedisServer) -> None:
    fork = multiprocessing.get_context("fork")
    with RedisClient("127.0.0.1", redis_server.port) as client:
        queue: multiprocessing.Queue = fork.Queue()  # type: ignore[type-arg]
        child = fork.Process(target=_client_in_child, args=(client, queue))
        child.start()
        assert queue.get(timeout=30) == "ForkedError"
        child.join(30)
        client.set("still-in-sync", b"yes")
        assert client.get("still-in-sync", bytearray(3)) == 3


# -- 4. a worker that dies --------------------------------------------------------------------------


def test_a_dead_worker_fails_the_store_at_once_with_a_resp_error(redis_server: RedisServer) -> None:
    store = store_for(redis_server, timeout=30)
    pages = store.allocate_many(2)

    async def in_flight() -> BaseException | None:
        pause(redis_server)
        try:
            pending = asyncio.ensure_future(store.aget(["a"], pages[:1]))
            await asyncio.sleep(0.1)
            for worker in range(2):
                hooks.corrupt_ring(store._native, worker)
            started = time.monotonic()
            try:
                await asyncio.wait_for(pending, 5)
            except RespError as exc:
                assert time.monotonic() - started < 5
                return exc
            return None
        finally:
            resume(redis_server)

    failure = asyncio.run(in_flight())
    assert isinstance(failure, RespError), "the batch in flight completes with an error"
    started = time.monotonic()
    for call in (lambda: store.get(["a"], pages[:1]), lambda: store.exists(["a"]), store.allocate):
        with pytest.raises(EngineFailedError, match="close it and create a new one"):
            call()
    assert time.monotonic() - started < 1, "every later call fails at once"
    store.close()


def test_a_dead_connector_worker_gives_lmcache_a_completion_not_a_hang(redis_server: RedisServer) -> None:
    connector = RespConnector(host="127.0.0.1", port=redis_server.port, num_workers=1)
    hooks.corrupt_ring(connector._native, 0)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            connector.submit_batch_exists(["x"])
        except EngineFailedError:
            break
        time.sleep(0.01)
    else:
        pytest.fail("the connector did not notice its dead worker")
    connector.close()


# -- 5. secrets -------------------------------------------------------------------------------------


@pytest.fixture
def echoing_server(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    """A real redis-server whose AUTH is disabled: it answers AUTH with "unknown command
    'AUTH', with args beginning with: '<the password>'"."""
    server = RedisServer(tmp_path_factory.mktemp("redis-echo"), conf=('rename-command AUTH ""',))
    yield server
    server.kill()


def test_a_server_that_echoes_the_password_never_gets_it_into_an_exception(echoing_server: RedisServer) -> None:
    password = "hunter2-echoed"
    makers = [
        lambda: RedisClient("127.0.0.1", echoing_server.port, password=password),
        lambda: store_for(echoing_server, password=password),
        lambda: RespConnector(host="127.0.0.1", port=echoing_server.port, password=password, num_workers=1),
    ]
    for make in makers:
        with pytest.raises(RespError) as info:
            make()
        shown = f"{info.value} {info.value!r} {info.value.args}"
        assert "with args beginning with: '***'" in shown, shown
        assert password not in shown


# -- 6. smaller ones ----------------------------------------------------------------------------------


def test_a_page_with_live_views_is_not_freed(redis_server: RedisServer) -> None:
    with store_for(redis_server) as store:
        page = store.allocate()
        assert page is not None
        view = memoryview(page)
        array = page.numpy()
        assert page.views == 2
        with pytest.raises(PageError, match="2 live view"):
            store.free(page)
        view.release()
        del array
        assert page.views == 0
        store.free(page)
        assert store.free_pages == 8


def test_duplicate_keys_in_one_put_or_delete_are_refused_before_any_io(redis_server: RedisServer) -> None:
    with store_for(redis_server) as store:
        pages = store.allocate_many(3)
        with pytest.raises(InvalidInputError, match=r'keys 0 and 2 are the same key \("k"\) in one SET batch'):
            store.put(["k", "other", "k"], pages)
        with pytest.raises(InvalidInputError, match="in one DEL batch"):
            store.delete(["k", "k"])
        assert redis_py(redis_server).dbsize() == 0
        store.put(["k", "other"], pages[:2])
        assert store.get(["k", "k"], pages[1:]) == [True, True], "reading a key twice is fine"


def test_a_pool_far_larger_than_memory_is_refused_saying_how_much(redis_server: RedisServer) -> None:
    with pytest.raises(InvalidInputError, match=r"the page arena would take \d+ bytes \([\d.]+ GiB\), more than"):
        store_for(redis_server, page_size=1 << 30, num_pages=1 << 20)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda s, p: s.put(["a"], p[:1], lengths=[1.7]), r"lengths\[0\] must be an int number of bytes, got float 1.7"),
        (lambda s, p: s.put(["a"], p[:1], lengths=[True]), r"lengths\[0\] must be an int"),
        (lambda s, p: s.exists("abc"), "keys must be a list .* not a single str"),
        (lambda s, p: s.delete(b"abc"), "keys must be a list .* not a single bytes"),
        (lambda s, p: s.get(["a"], p[0]), "pages must be a sequence"),
    ],
)
def test_ambiguous_arguments_are_refused(redis_server: RedisServer, call: object, message: str) -> None:
    with store_for(redis_server) as store:
        pages = store.allocate_many(2)
        with pytest.raises((InvalidInputError, TypeError), match=message):
            call(store, pages)  # type: ignore[operator]


@pytest.mark.parametrize("how", ["close", "drop"])
def test_closing_waits_for_the_workers_without_holding_the_gil(redis_server: RedisServer, how: str) -> None:
    store = store_for(redis_server, timeout=2)
    pages = store.allocate_many(1)
    pause(redis_server)
    try:
        store.submit_get(["slow"], pages)
        time.sleep(0.1)
        with ThreadTicks() as ticks:
            started = time.monotonic()
            if how == "close":
                store.close()
            else:
                del pages
                del store
            took = time.monotonic() - started
    finally:
        resume(redis_server)
    assert took > 0.5, "close waited for the GET on the wire"
    assert ticks.count > 100, f"another Python thread ran only {ticks.count} times while close() waited: the GIL was held"


def test_authentication_errors_still_name_the_user_not_the_password(secure_server: RedisServer) -> None:
    with pytest.raises(AuthenticationError) as info:
        RedisClient("127.0.0.1", secure_server.port, username="alice", password="not-her-password")
    assert "alice" in str(info.value) and "not-her-password" not in str(info.value)


def test_settings_from_a_url_with_a_raw_slash_in_the_password_connect(secure_server: RedisServer) -> None:
    redis_py(secure_server).config_set("requirepass", "pa/ss#w?rd")
    settings = RespSettings.resolve(f"redis://:pa/ss#w?rd@127.0.0.1:{secure_server.port}", env={})
    with RedisClient(url=f"redis://:pa/ss#w?rd@127.0.0.1:{secure_server.port}") as client:
        client.ping()
    assert settings.password is not None and settings.password.reveal() == "pa/ss#w?rd"
    assert "pa/ss" not in repr(settings)


def test_views_of_pages_survive_their_store_as_memory_not_as_data(redis_server: RedisServer) -> None:
    """A view kept after close still points at mapped memory (no crash), but the page is no
    longer valid: the store refuses it."""
    store = store_for(redis_server)
    page = store.allocate()
    assert page is not None
    view = memoryview(page)
    store.close()
    assert len(view) == 4096 and view[0] == 0
    assert not page.valid
    view.release()
