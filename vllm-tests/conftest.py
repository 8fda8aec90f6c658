"""Fixtures for the tests of a real vLLM engine on CPU (run by scripts/test-vllm.sh only): the
model (written once per session), a throwaway Redis or Valkey server on a free port (never 6379;
REDIS_TEST_SERVER picks it, as everywhere in the project)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from lmcache_resp.bench.vllm_model import write_model
from lmcache_resp_servers import RedisServer


@pytest.fixture(scope="session")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("model"), seed=0)


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def clean_resp_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's LMCACHE_RESP_* must not reach the servers the tests start."""
    for name in ("LMCACHE_RESP_HOST", "LMCACHE_RESP_PORT", "LMCACHE_RESP_USERNAME", "LMCACHE_RESP_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
