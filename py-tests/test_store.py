"""PagedRespStore against a real redis-server: pages, batches, asyncio, failures."""

from __future__ import annotations

import asyncio
import select
import threading
import time

import numpy as np
import pytest
from conftest import RedisServer, pattern, wait_until_up

from lmcache_resp import (
    BatchError,
    ClosedError,
    InvalidInputError,
    PagedRespStore,
    PageError,
    RespConnectionError,
    RespTimeoutError,
    ValueTooLargeError,
)
from lmcache_resp_testing.servers import pause, redis_py, resume


def make_store(server: RedisServer, **kwargs: object) -> PagedRespStore:
    options: dict[str, object] = {"page_size": 64 * 1024, "num_pages": 64, "num_workers": 4}
    options.update(kwargs)
    return PagedRespStore(f"redis://127.0.0.1:{server.port}", **options)  # type: ignore[arg-type]


def fill(page, seed: int) -> bytes:
    data = pattern(page.size, seed)
    memoryview(page)[:] = data
    return data


def test_pages_are_page_aligned_writable_views(redis_server: RedisServer) -> None:
    with make_store(redis_server, page_size=10_000, num_pages=4) as store:
        page = store.allocate()
        assert page is not None
        assert page.size == len(page) == 10_000
        assert page.address % 4096 == 0 and page.data_ptr == page.address
        view = memoryview(page)
        assert not view.readonly and view.nbytes == 10_000 and view.format == "B"
        view[:3] = b"abc"
        assert bytes(page.byte_array[:3]) == b"abc"
        array = page.numpy(np.float32)
        assert array.shape == (2500,) and array.flags.writeable
        array[:] = 1.5
        assert np.frombuffer(page, dtype=np.float32)[0] == 1.5
        assert page.numpy(np.uint8, (100, 100)).shape == (100, 100)
        page.write_bytes(b"xyz", 9_997)
        assert bytes(view[9_997:]) == b"xyz"
        with pytest.raises(InvalidInputError, match="do not fit"):
            page.write_bytes(b"toolong", 9_997)
        other = store.allocate()
        assert other is not None and other.offset - page.offset == 12_288, "pages are 4096-byte strided"


def test_torch_view_when_torch_is_installed(redis_server: RedisServer) -> None:
    torch = pytest.importorskip("torch")
    with make_store(redis_server) as store:
        page = store.allocate()
        tensor = page.torch(torch.bfloat16, (16, 2048))
        tensor.fill_(2.0)
        assert page.numpy(np.uint16)[0] == 0x4000


def test_allocate_never_hands_out_a_page_twice_and_free_is_checked(redis_server: RedisServer) -> None:
    with make_store(redis_server, num_pages=8) as store, make_store(redis_server, num_pages=2) as other_store:
        pages = store.allocate_many(8)
        assert len({p.index for p in pages}) == 8
        assert store.allocate() is None
        assert store.free_pages == 0
        with pytest.raises(PageError, match="only 0 free"):
            store.allocate_many(1)
        store.free(pages[0])
        with pytest.raises(PageError, match="double free"):
            store.free(pages[0])
        again = store.allocate()
        assert again is not None and again.index == pages[0].index
        with pytest.raises(PageError, match="no longer valid"):
            store.free(pages[0])  # stale handle: the page now belongs to `again`
        with pytest.raises(PageError, match="use after free|no longer valid"):
            store.put(["k"], [pages[0]])
        foreign = other_store.allocate()
        with pytest.raises(PageError, match="different store"):
            store.free(foreign)
        with pytest.raises(PageError, match="different store"):
            store.put(["k"], [foreign])


def test_put_get_round_trip_and_variable_lengths(redis_server: RedisServer) -> None:
    with make_store(redis_server) as store:
        pages = store.allocate_many(10)
        data = [fill(p, i) for i, p in enumerate(pages)]
        keys = [f"rt:{i}" for i in range(10)]
        lengths = [p.size - i * 1000 for i, p in enumerate(pages)]
        store.put(keys, pages, lengths)
        assert redis_py(redis_server).get("rt:3") == data[3][: lengths[3]]
        for p in pages:
            memoryview(p)[:] = b"\0" * p.size
        assert store.get_lengths(keys, pages) == lengths
        for i, p in enumerate(pages):
            assert bytes(memoryview(p)[: lengths[i]]) == data[i][: lengths[i]]
        assert store.exists(keys + ["nope"]) == [True] * 10 + [False]
        assert store.delete(keys[:5] + ["nope"]) == [True] * 5 + [False]
        assert store.exists(keys) == [False] * 5 + [True] * 5


def test_ten_thousand_keys_of_mixed_sizes_byte_exact(redis_server: RedisServer) -> None:
    with make_store(redis_server, page_size=8192, num_pages=10_000, timeout=60) as store:
        pages = store.allocate_many(10_000)
        sizes = [(i * 7919) % 8192 + 1 for i in range(10_000)]
        keys = [f"mixed:{i}".encode() for i in range(10_000)]
        expected = []
        for i, page in enumerate(pages):
            data = pattern(sizes[i], i)
            memoryview(page)[: sizes[i]] = data
            expected.append(data)
        store.put(keys, pages, sizes)
        for page in pages:
            memoryview(page)[:] = b"\xff" * 8192
        assert store.get_lengths(keys, pages) == sizes
        for i, page in enumerate(pages):
            view = memoryview(page)
            assert bytes(view[: sizes[i]]) == expected[i], f"key {i}"
            assert bytes(view[sizes[i] : sizes[i] + 1]) in (b"\xff", b""), "nothing written past the value"
        assert redis_py(redis_server).dbsize() == 10_000


def test_misses_hits_and_wrong_sizes_in_one_batch(redis_server: RedisServer) -> None:
    other = redis_py(redis_server)
    other.set("small", b"s" * 100)
    other.set("exact", b"e" * 4096)
    other.set("large", b"l" * 5000)
    with make_store(redis_server, page_size=4096, num_pages=8) as store:
        pages = store.allocate_many(4)
        for p in pages:
            memoryview(p)[:] = b"\x07" * 4096
        with pytest.raises(BatchError, match="1 of 4 keys failed") as info:
            store.get(["small", "missing", "large", "exact"], pages)
        results = info.value.results
        assert results[0] == 100 and results[1] is None and results[3] == 4096
        assert isinstance(results[2], ValueTooLargeError)
        assert list(info.value.errors) == [2]
        assert isinstance(info.value.__cause__, ValueTooLargeError)
        assert bytes(memoryview(pages[0])[:100]) == b"s" * 100
        assert bytes(memoryview(pages[1])) == b"\x07" * 4096, "a miss leaves its page untouched"
        assert bytes(memoryview(pages[2])) == b"\x07" * 4096, "a too-large value is not written"
        # The connection drained the 5000 bytes and stays in sync.
        assert store.get(["exact", "small"], pages[:2]) == [True, True]


def test_key_sizes(redis_server: RedisServer) -> None:
    with make_store(redis_server) as store:
        keys = [b"k", b"m" * 200, pattern(65_536, 1)]
        pages = store.allocate_many(3)
        data = [fill(p, 10 + i) for i, p in enumerate(pages)]
        store.put(keys, pages)
        assert [redis_py(redis_server).get(k) for k in keys] == data
        with pytest.raises(InvalidInputError, match="longer than the limit"):
            store.exists([b"k" * (256 * 1024 + 1)])
        with pytest.raises(TypeError, match="str or bytes"):
            store.exists([1])  # type: ignore[list-item]
        with pytest.raises(InvalidInputError, match="2 keys but 1 pages"):
            store.put(["a", "b"], pages[:1])
        with pytest.raises(InvalidInputError, match="appears twice"):
            store.get(["a", "b"], [pages[0], pages[0]])


def test_asyncio_through_the_eventfd_without_a_polling_thread(redis_server: RedisServer) -> None:
    async def main() -> None:
        async with make_store(redis_server) as store:
            threads_before = threading.active_count()
            pages = store.allocate_many(20)
            data = [fill(p, 100 + i) for i, p in enumerate(pages)]
            keys = [f"async:{i}" for i in range(20)]
            await asyncio.gather(store.aput(keys[:10], pages[:10]), store.aput(keys[10:], pages[10:]))
            for p in pages:
                memoryview(p)[:] = bytes(p.size)
            hits = await store.aget(keys + ["absent"], pages + [store.allocate()])
            assert hits == [True] * 20 + [False]
            assert [bytes(memoryview(p)) for p in pages] == data
            assert await store.aexists(keys[:2]) == [True, True]
            assert await store.adelete(keys[:2]) == [True, True]
            assert threading.active_count() == threads_before, "no helper thread was started"

    asyncio.run(main())


def test_submit_and_drain_for_integrators(redis_server: RedisServer) -> None:
    with make_store(redis_server) as store:
        pages = store.allocate_many(3)
        for i, p in enumerate(pages):
            fill(p, i)
        put_id = store.submit_put(["a", "b", "c"], pages)
        exists_id = store.submit_exists(["a", "zzz"])
        done = {}
        deadline = time.monotonic() + 10
        while len(done) < 2 and time.monotonic() < deadline:
            readable, _, _ = select.select([store.event_fd()], [], [], 1)
            if readable:
                for completion in store.drain_completions():
                    done[completion[0]] = completion
        assert done[put_id] == (put_id, True, "", None)
        # The EXISTS batch may complete before the PUT batch it was submitted after: its
        # answer for "a" is whichever came first, but "zzz" never exists.
        assert done[exists_id][1:3] == (True, "") and done[exists_id][3][1] is False
        with pytest.raises(PageError, match="in flight"):
            busy = store.submit_get(["a"], [pages[0]])
            store.free(pages[0])
        while not any(c[0] == busy for c in store.drain_completions()):
            time.sleep(0.001)
        store.free(pages[0])


def test_four_threads_submit_while_another_drains(redis_server: RedisServer) -> None:
    with make_store(redis_server, num_pages=64) as store:
        submitted: list[int] = []
        lock = threading.Lock()

        def submitter(t: int) -> None:
            pages = store.allocate_many(8)
            for p in pages:
                fill(p, t)
            for r in range(25):
                keys = [f"t{t}:{r}:{i}" for i in range(8)]
                store.put(keys, pages)
                batch_id = store.submit_exists(keys)
                with lock:
                    submitted.append(batch_id)

        drained: list[tuple[int, bool, str, list[bool] | None]] = []
        stop = threading.Event()

        def drainer() -> None:
            while not stop.is_set() or len(drained) < 100:
                select.select([store.event_fd()], [], [], 0.05)
                drained.extend(store.drain_completions())
                if stop.is_set() and time.monotonic() > give_up:
                    return

        give_up = time.monotonic() + 60
        drain_thread = threading.Thread(target=drainer)
        drain_thread.start()
        workers = [threading.Thread(target=submitter, args=(t,)) for t in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        stop.set()
        drain_thread.join()
        assert sorted(c[0] for c in drained) == sorted(submitted)
        assert all(c[1] and c[3] == [True] * 8 for c in drained)


def test_server_killed_and_restarted_mid_batch(redis_server: RedisServer) -> None:
    with make_store(redis_server, page_size=512 * 1024, num_pages=64, timeout=5) as store:
        pages = store.allocate_many(64)
        for i, p in enumerate(pages):
            fill(p, i)
        keys = [f"restart:{i}" for i in range(64)]
        outcome: list[BaseException | None] = []

        def put_all() -> None:
            try:
                for _ in range(5):
                    store.put(keys, pages)
                outcome.append(None)
            except BaseException as exc:  # noqa: BLE001 - the test inspects it
                outcome.append(exc)

        started = time.monotonic()
        writer = threading.Thread(target=put_all)
        writer.start()
        time.sleep(0.05)
        redis_server.restart()
        writer.join(timeout=30)
        assert not writer.is_alive(), "a batch hung"
        assert time.monotonic() - started < 30
        failure = outcome[0]
        if failure is not None:
            assert isinstance(failure, BatchError), failure
            assert all(isinstance(e, (RespConnectionError, RespTimeoutError)) for e in failure.errors.values())
        wait_until_up(store)
        store.put(keys[:4], pages[:4])
        for p in pages[:4]:
            memoryview(p)[:] = bytes(p.size)
        assert store.get(keys[:4], pages[:4]) == [True] * 4
        assert bytes(memoryview(pages[1])) == pattern(512 * 1024, 1)


def test_close_with_work_in_flight(redis_server: RedisServer) -> None:
    store = make_store(redis_server, page_size=1 << 20, num_pages=32)
    pages = store.allocate_many(32)
    ids = [store.submit_put([f"c{j}:{i}" for i in range(32)], pages) for j in range(4)]
    store.close()
    completions = store.drain_completions()
    assert sorted(c[0] for c in completions) == ids, "every batch gets its completion"
    for _id, ok, error, _per_key in completions:
        assert ok or "closed" in error
    for call in (store.allocate, lambda: store.put(["k"], pages[:1]), lambda: store.exists(["k"]), lambda: store.free(pages[0])):
        with pytest.raises(ClosedError):
            call()
    with pytest.raises(ClosedError):
        memoryview(pages[0])
    store.close()


def test_async_close_resolves_waiting_futures(redis_server: RedisServer) -> None:
    async def main() -> None:
        store = make_store(redis_server, page_size=1 << 20, num_pages=16)
        pages = store.allocate_many(16)
        task = asyncio.ensure_future(store.aput([f"ac:{i}" for i in range(16)], pages))
        await asyncio.sleep(0)
        store.close()
        try:
            await asyncio.wait_for(task, 10)
        except BatchError as exc:
            assert all(isinstance(e, ClosedError) for e in exc.errors.values())

    asyncio.run(main())


def test_stalled_server_fails_within_the_timeout(redis_server: RedisServer) -> None:
    with make_store(redis_server, timeout=0.5) as store:
        pages = store.allocate_many(4)
        pause(redis_server)
        started = time.monotonic()
        try:
            with pytest.raises(BatchError) as info:
                store.get(["a", "b", "c", "d"], pages)
        finally:
            elapsed = time.monotonic() - started
            resume(redis_server)
        assert 0.5 <= elapsed < 1.5
        assert all(isinstance(e, RespTimeoutError) for e in info.value.errors.values())
        assert store.get(["a"], pages[:1]) == [False]


def test_num_pages_or_pool_size(redis_server: RedisServer) -> None:
    with make_store(redis_server, page_size=1000, num_pages=None, pool_size=10_500) as store:
        assert store.num_pages == 10, "an incomplete tail is skipped"
    with pytest.raises(InvalidInputError, match="exactly one"):
        make_store(redis_server, pool_size=100)
    with pytest.raises(InvalidInputError, match="page_size"):
        make_store(redis_server, page_size=0)


def test_another_process_can_map_the_arena_and_see_the_pages(redis_server: RedisServer) -> None:
    import os
    import subprocess
    import sys

    with make_store(redis_server, page_size=8192, num_pages=4) as store:
        page = store.allocate_many(2)[1]
        data = pattern(8192, 77)
        memoryview(page)[:] = data
        reader = (
            "import mmap, sys\n"
            "path, offset, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])\n"
            "with open(path, 'rb') as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:\n"
            "    assert m[:8] == b'LMCARENA', m[:8]\n"
            "    sys.stdout.buffer.write(m[offset:offset + size])\n"
        )
        path = f"/proc/{os.getpid()}/fd/{store.arena_fd}"
        out = subprocess.run(
            [sys.executable, "-c", reader, path, str(page.offset), str(page.size)], capture_output=True, check=True
        ).stdout
        assert out == data
        assert store.arena_name.startswith("lmcache-resp-")
