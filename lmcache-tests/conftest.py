"""Fixtures for the tests against a real LMCache, 0.5.6 or 0.5.7rc2 (run by scripts/test-lmcache.sh only).

Every test talks to a real, throwaway redis-server on a free port (never 6379), started by the
launcher (lmcache_resp_servers) like the rest of the project's tests.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from lmc_helpers import RESP_ENV, RedisServer
from lmcache_resp_testing.servers import redis_py


@pytest.fixture(scope="session")
def redis_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.kill()


@pytest.fixture
def redis_server(redis_session: RedisServer) -> RedisServer:
    """The session's server, emptied for this test."""
    redis_py(redis_session).flushall()
    return redis_session


@pytest.fixture
def secure_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis-secure"), password="lmcache-test-pw-9f3a")
    yield server
    server.kill()


@pytest.fixture(autouse=True)
def clean_resp_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """A developer's LMCACHE_RESP_* must not leak into the tests."""
    for name in RESP_ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.fixture
def lmcache_loop() -> Iterator[asyncio.AbstractEventLoop]:
    """LMCache's arrangement: an asyncio loop running in a thread of its own."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="lmcache-test-loop", daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    loop.close()


