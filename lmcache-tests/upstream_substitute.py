"""A pytest plugin that runs LMCache's own tests (0.5.6's, or 0.5.7rc2's) with lmcache-resp substituted.

Loaded with ``-p upstream_substitute`` (this directory on PYTHONPATH) into a pytest run over the
``tests/`` tree of the installed LMCache's sdist. ``LMCACHE_RESP_TEST_PORT`` names a throwaway
redis-server. What is substituted:

- ``tests/v1/distributed/test_resp_l2_adapter_integration.py`` (MP, real Redis): LMCache's C++
  ``lmcache.lmcache_redis.LMCacheRedisClient`` becomes :class:`~lmcache_resp.RespConnector`,
  built with the same arguments; also under ``create_l2_adapter`` for ``"type": "resp"``.
- ``tests/v1/distributed/test_native_connector_l2_adapter.py`` (MP, NativeConnectorL2Adapter):
  its in-memory ``MockNativeConnector`` (and the recording subclass) become RespConnectors on
  the throwaway server, each starting from an empty database as the mock starts empty.
- ``tests/v1/storage_backend/test_resp_connector.py`` (non-MP): the ``resp://`` URL's adapter
  builds :class:`~lmcache_resp.lmcache.non_mp.RespRemoteConnector` instead of LMCache's
  ``RESPConnector`` (the tests' ``resp://mock.local:0`` maps to the throwaway server).
"""

from __future__ import annotations

import os
import socket
from typing import Any

import pytest

PORT = int(os.environ["LMCACHE_RESP_TEST_PORT"])
HOST = "127.0.0.1"

# How many of ours the run built, printed at the end: proof the substitution took effect.
BUILT = {"RespConnector (for LMCacheRedisClient)": 0, "RespConnector (for MockNativeConnector)": 0,
         "RespRemoteConnector (for resp:// RESPConnector)": 0}


def _flush() -> None:
    """FLUSHDB on the throwaway server (over a plain socket: LMCache's tests/conftest.py
    replaces redis-py's client with an in-memory mock)."""
    with socket.create_connection((HOST, PORT), timeout=10) as sock:
        sock.sendall(b"FLUSHDB\r\n")
        assert sock.recv(16).startswith(b"+OK"), "FLUSHDB failed"


def _resp_client(host: str, port: int, num_workers: int, username: str = "", password: str = "") -> Any:
    """LMCacheRedisClient's signature, our connector."""
    from lmcache_resp import RespConnector

    BUILT["RespConnector (for LMCacheRedisClient)"] += 1
    return RespConnector(host=host, port=port, num_workers=num_workers, username=username, password=password,
                         cpu_affinity="none")


def _fresh_connector_class() -> type:
    from lmcache_resp import RespConnector

    class FreshRespConnector(RespConnector):
        """MockNativeConnector's role: starts empty, no arguments."""

        def __init__(self) -> None:
            _flush()
            BUILT["RespConnector (for MockNativeConnector)"] += 1
            super().__init__(host=HOST, port=PORT, num_workers=2, cpu_affinity="none")

    class RecordingRespConnector(FreshRespConnector):
        """RecordingNativeConnector's role: records the buffer lengths LMCache submits."""

        def __init__(self) -> None:
            super().__init__()
            self.set_lengths: list[int] = []
            self.get_lengths: list[int] = []

        def submit_batch_set(self, keys: Any, memoryviews: Any) -> int:
            self.set_lengths.extend(len(mv) for mv in memoryviews)
            return super().submit_batch_set(keys, memoryviews)

        def submit_batch_get(self, keys: Any, memoryviews: Any) -> int:
            self.get_lengths.extend(len(mv) for mv in memoryviews)
            return super().submit_batch_get(keys, memoryviews)

    FreshRespConnector.Recording = RecordingRespConnector  # type: ignore[attr-defined]
    return FreshRespConnector


def _create_plugin_connector(self: Any, context: Any) -> Any:
    """RESPConnectorAdapter.create_connector, building our non-MP plugin instead."""
    from lmcache_resp import RespSettings
    from lmcache_resp.lmcache.non_mp import RespRemoteConnector

    _flush()
    BUILT["RespRemoteConnector (for resp:// RESPConnector)"] += 1
    extra = context.config.extra_config or {}
    settings = RespSettings.resolve(host=HOST, port=PORT, num_workers=int(extra.get("resp_num_threads", 8)),
                                    cpu_affinity="none")
    return RespRemoteConnector(loop=context.loop, local_cpu_backend=context.local_cpu_backend,
                               config=context.config, settings=settings)


def pytest_configure(config: pytest.Config) -> None:
    import lmcache.lmcache_redis as native
    from lmcache.v1.storage_backend.connector import redis_adapter

    native.LMCacheRedisClient = _resp_client  # looked up at call time by the tests and the factory
    redis_adapter.RESPConnectorAdapter.create_connector = _create_plugin_connector
    config.addinivalue_line("markers", "substituted: runs over lmcache-resp")


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    fresh = _fresh_connector_class()
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and module.__name__.endswith("test_native_connector_l2_adapter"):
            # The fixtures look these names up when they run.
            module.MockNativeConnector = fresh
            module.RecordingNativeConnector = fresh.Recording  # type: ignore[attr-defined]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for what, count in BUILT.items():
        terminalreporter.write_line(f"lmcache-resp substituted: {count} x {what}")
