"""Helpers for the tests against a real LMCache 0.5.6 (run by scripts/test-lmcache.sh only).

Every test talks to a real, throwaway redis-server on a free port (never 6379), started through
native-tests/redis-test-server.sh like the rest of the project's tests.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

# Before LMCache is imported anywhere: no usage telemetry from test runs.
os.environ["LMCACHE_TRACK_USAGE"] = "false"
os.environ.setdefault("LMCACHE_DISABLE_BANNER", "1")

REPO = Path(__file__).resolve().parents[1]
SERVER_SCRIPT = REPO / "native-tests" / "redis-test-server.sh"
EXAMPLES = REPO / "examples" / "lmcache"
MP_EXAMPLE = EXAMPLES / "mp-l2-adapter.json"
NON_MP_EXAMPLE = EXAMPLES / "non-mp.yaml"

# What the examples name; the tests swap only the port (see load_mp_example/load_non_mp_example).
EXAMPLE_HOST = "127.0.0.1"
EXAMPLE_PORT = 6379

RESP_ENV = ("LMCACHE_RESP_HOST", "LMCACHE_RESP_PORT", "LMCACHE_RESP_USERNAME", "LMCACHE_RESP_PASSWORD")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A redis-server child process: no persistence, a temp dir, a free port."""

    def __init__(self, directory: Path, *, password: str | None = None) -> None:
        self.directory = directory
        self.password = password
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        for attempt in range(5):
            self.port = free_port()
            try:
                self._spawn()
                return
            except RuntimeError as exc:
                if "Address already in use" not in str(exc) or attempt == 4:
                    raise

    def _spawn(self) -> None:
        assert self.port != EXAMPLE_PORT
        args = ["bash", str(SERVER_SCRIPT), str(self.directory), str(self.port)]
        if self.password:
            args += ["--password", self.password]  # the script writes it to redis.conf, not argv
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while True:
            if process.poll() is not None:
                err = process.stderr.read().decode(errors="replace") if process.stderr else ""
                log = self.directory / "redis.log"
                raise RuntimeError(f"redis-server did not start: {err}\n{log.read_text() if log.exists() else ''}")
            if self._answers():
                self.process = process
                return
            if time.monotonic() > deadline:
                process.kill()
                raise RuntimeError("redis-server did not answer within 10 s")
            time.sleep(0.01)

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                return bool(sock.recv(64))
        except OSError:
            return False

    def redis_py(self) -> Any:
        """An independent client (redis-py, an LMCache dependency) to check what the server holds."""
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, password=self.password)

    def kill(self) -> None:
        if self.process is not None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
            self.process.wait()
            self.process = None


def run_on(loop: asyncio.AbstractEventLoop, coro: Any, timeout: float = 30) -> Any:
    return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)


# -- the examples, used verbatim except for the port -----------------------------------------------


def load_mp_example(port: int) -> tuple[str, dict[str, Any]]:
    """examples/lmcache/mp-l2-adapter.json with adapter_params.port set to ``port``: the JSON
    text (what goes after --l2-adapter) and the document."""
    document = json.loads(MP_EXAMPLE.read_text())
    params = document["adapter_params"]
    assert (params["host"], params["port"]) == (EXAMPLE_HOST, EXAMPLE_PORT), "the example names 127.0.0.1:6379"
    params["port"] = port
    return json.dumps(document), document


def load_non_mp_example(port: int, directory: Path) -> Path:
    """examples/lmcache/non-mp.yaml with remote_storage_plugin.resp.port set to ``port``,
    written to ``directory``; LMCache reads it with LMCacheEngineConfig.from_file."""
    import yaml

    document = yaml.safe_load(NON_MP_EXAMPLE.read_text())
    extra = document["extra_config"]
    key = "remote_storage_plugin.resp.port"
    assert (extra["remote_storage_plugin.resp.host"], extra[key]) == (EXAMPLE_HOST, EXAMPLE_PORT)
    extra[key] = port
    path = directory / "non-mp.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def pattern(length: int, seed: int) -> bytes:
    import random

    return random.Random(seed).randbytes(length)
