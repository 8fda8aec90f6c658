"""Chaos and soak: the store under a server that is killed, frozen, restarted and has its
clients killed, while threads and an event loop run mixed batches; and a million operations
with the process's memory watched.

The invariants, whatever the faults: every call returns (with results or an error) within
its timeout plus a margin, every batch has one outcome per key, and every byte a hit hands
back is a whole value that was once stored under that key. The fault schedule is random but
seeded; what is asserted does not depend on it.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import threading
import time
from collections.abc import Callable, Sequence

import pytest
from conftest import RedisServer, wait_until_up

from lmcache_resp import BatchError, EngineFailedError, Page, PagedRespStore, RespError
from lmcache_resp_testing.servers import pause, redis_py, resume

PAGE = 64 * 1024
TIMEOUT = 2.0
MARGIN = 3.0
CHAOS_SECONDS = 12.0


def value_for(key: str, version: int, length: int) -> bytes:
    """A self-describing value: a header naming the key and version, then bytes derived from
    both, so a page read back can be checked without knowing which write won."""
    header = f"{key}|{version}|{length}|".encode().ljust(64, b"\0")
    seed = hashlib.blake2b(header, digest_size=8).digest()
    body = (seed * (length // 8 + 1))[: length - 64]
    return header + body


def check_value(key: str, data: bytes) -> str | None:
    """None when `data` is a whole value written for `key`; otherwise what is wrong."""
    header = data[:64].rstrip(b"\0").decode(errors="replace").split("|")
    if len(header) < 4 or header[0] != key:
        return f"{key}: header {header!r} names another key or is torn"
    try:
        version, length = int(header[1]), int(header[2])
    except ValueError:
        return f"{key}: unreadable header {header!r}"
    if data[:length] != value_for(key, version, length):
        return f"{key}: bytes of version {version} do not match"
    return None


class Worker:
    """One thread's keys and pages, and what it saw."""

    def __init__(self, store: PagedRespStore, name: str, pages: Sequence[Page], rng: random.Random) -> None:
        self.store, self.name, self.pages, self.rng = store, name, list(pages), rng
        self.keys = [f"{name}:{i}" for i in range(len(self.pages))]
        self.version = 0
        self.problems: list[str] = []
        self.calls = 0
        self.failed_keys = 0

    def timed(self, what: str, call: Callable[[], object], keys: int) -> object:
        started = time.monotonic()
        try:
            result = call()
        except BatchError as exc:
            if len(exc.results) != keys:
                self.problems.append(f"{what}: {len(exc.results)} outcomes for {keys} keys")
            self.failed_keys += len(exc.errors)
            result = exc.results
        except EngineFailedError as exc:
            self.problems.append(f"{what}: the engine failed: {exc}")
            result = None
        except RespError:
            result = None
        took = time.monotonic() - started
        if took > TIMEOUT + MARGIN:
            self.problems.append(f"{what} took {took:.1f} s")
        self.calls += 1
        return result

    def step(self) -> None:
        n = self.rng.randint(1, len(self.pages))
        chosen = self.rng.sample(range(len(self.pages)), n)
        keys = [self.keys[i] for i in chosen]
        pages = [self.pages[i] for i in chosen]
        op = self.rng.choice(["put", "get", "get", "exists", "delete"])
        if op == "put":
            self.version += 1
            for key, page in zip(keys, pages):
                page.write_bytes(value_for(key, self.version, self.rng.randint(64, PAGE)))
            self.timed("put", lambda: self.store.put(keys, pages), n)
        elif op == "get":
            for page in pages:
                page.write_bytes(b"\x5a" * PAGE)
            result = self.timed("get", lambda: self.store.get_lengths(keys, pages), n)
            if isinstance(result, list):
                for key, page, length in zip(keys, pages, result):
                    if isinstance(length, int) and not isinstance(length, bool):
                        problem = check_value(key, bytes(page.byte_array)[:length])
                        if problem:
                            self.problems.append(f"wrong bytes: {problem}")
                    elif length is None and bytes(page.byte_array) != b"\x5a" * PAGE:
                        self.problems.append(f"{key}: a miss wrote into its page")
        elif op == "exists":
            self.timed("exists", lambda: self.store.exists(keys), n)
        else:
            self.timed("delete", lambda: self.store.delete(keys), n)


def run_threads(workers: Sequence[Worker], stop: threading.Event) -> list[threading.Thread]:
    def loop(worker: Worker) -> None:
        while not stop.is_set():
            worker.step()

    threads = [threading.Thread(target=loop, args=(w,), name=w.name, daemon=True) for w in workers]
    for thread in threads:
        thread.start()
    return threads


def run_asyncio(store: PagedRespStore, pages: Sequence[Page], stop: threading.Event, problems: list[str]) -> threading.Thread:
    keys = [f"async:{i}" for i in range(len(pages))]

    async def main() -> None:
        version = 0
        while not stop.is_set():
            version += 1
            for key, page in zip(keys, pages):
                page.write_bytes(value_for(key, version, PAGE))
            for call, what in ((lambda: store.aput(keys, pages), "aput"), (lambda: store.aget(keys, pages), "aget")):
                started = time.monotonic()
                try:
                    await call()
                except BatchError as exc:
                    if len(exc.results) != len(keys):
                        problems.append(f"{what}: {len(exc.results)} outcomes for {len(keys)} keys")
                except RespError:
                    pass
                if time.monotonic() - started > TIMEOUT + MARGIN:
                    problems.append(f"{what} took too long")
            for key, page in zip(keys, pages):
                data = bytes(page.byte_array)
                if data[:64].rstrip(b"\0").startswith(key.encode() + b"|"):
                    problem = check_value(key, data)
                    if problem and "version" in problem:
                        problems.append(f"async wrong bytes: {problem}")

    # A daemon: if it hangs, the test fails saying so and the run still ends.
    thread = threading.Thread(target=lambda: asyncio.run(main()), name="asyncio", daemon=True)
    thread.start()
    return thread


def test_chaos_no_hang_no_wrong_byte_one_outcome_per_key(redis_server: RedisServer) -> None:
    rng = random.Random(20261201)
    store = PagedRespStore(
        f"resp://127.0.0.1:{redis_server.port}", page_size=PAGE, num_pages=40, num_workers=4, timeout=TIMEOUT
    )
    workers = [Worker(store, f"t{i}", store.allocate_many(8), random.Random(rng.random())) for i in range(3)]
    async_pages = store.allocate_many(8)
    async_problems: list[str] = []
    stop = threading.Event()
    threads = run_threads(workers, stop)
    threads.append(run_asyncio(store, async_pages, stop, async_problems))
    faults: list[str] = []
    ends = time.monotonic() + CHAOS_SECONDS
    try:
        while time.monotonic() < ends:
            time.sleep(rng.uniform(0.2, 0.8))
            fault = rng.choice(["restart", "stall", "kill-clients", "calm"])
            faults.append(fault)
            if fault == "restart":
                redis_server.restart()
            elif fault == "stall":
                pause(redis_server)
                time.sleep(rng.uniform(0.3, TIMEOUT + 0.5))
                resume(redis_server)
            elif fault == "kill-clients":
                try:
                    redis_py(redis_server).client_kill_filter(_type="normal", skipme=True)
                except Exception:  # noqa: BLE001 - a restart may race it; the fault is best effort
                    pass
    finally:
        resume(redis_server)
        stop.set()
        for thread in threads:
            thread.join(TIMEOUT + MARGIN + 5)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    problems = [p for w in workers for p in w.problems] + async_problems
    assert problems == [], problems[:10]
    assert {"restart", "stall", "kill-clients"} <= set(faults), faults
    assert sum(w.calls for w in workers) > 50
    # Once the faults stop (and the probe has found the server back), everything works again.
    wait_until_up(store)
    worker = workers[0]
    for key, page in zip(worker.keys, worker.pages):
        page.write_bytes(value_for(key, 999, PAGE))
    store.put(worker.keys, worker.pages)
    assert store.get(worker.keys, worker.pages) == [True] * len(worker.keys)
    assert all(check_value(k, bytes(p.byte_array)) is None for k, p in zip(worker.keys, worker.pages))
    store.close()


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


@pytest.mark.timeout(300)
def test_soak_a_million_mixed_operations_with_flat_memory(redis_server: RedisServer) -> None:
    batch, rounds = 1000, 250  # 4 ops x 1000 keys x 250 rounds = 10^6 operations
    samples: list[int] = []
    with PagedRespStore(f"resp://127.0.0.1:{redis_server.port}", page_size=512, num_pages=batch, num_workers=4) as store:
        pages = store.allocate_many(batch)
        for i, page in enumerate(pages):
            page.write_bytes(i.to_bytes(4, "little") * 128)
        for round_ in range(rounds):
            keys = [f"soak:{round_ % 7}:{i}" for i in range(batch)]
            store.put(keys, pages)
            assert store.get(keys, pages) == [True] * batch
            assert store.exists(keys) == [True] * batch
            assert store.delete(keys) == [True] * batch
            if round_ % 10 == 9:
                samples.append(rss_bytes())
        assert bytes(pages[7].byte_array) == (7).to_bytes(4, "little") * 128
    # After a warm-up, memory stays flat: no growth per batch (leaked results, buffers,
    # completions) over the remaining 800,000 operations.
    settled = samples[5:]
    growth = max(settled) - settled[0]
    assert growth < 4 << 20, f"RSS grew by {growth / 2**20:.1f} MiB: {[s >> 20 for s in samples]} MiB"
