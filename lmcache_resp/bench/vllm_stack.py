"""The parts of a served model's KV path, each a real process: LMCache's MP server with one L2
adapter (``LMCacheServer``), a vLLM engine (``Engine``, driving vllm_engine.py), and what the
Redis or Valkey server counted (``command_calls``). Used by --vllm-ttft (vllm_ttft.py) and by
vllm-tests/; both run in vLLM's environment (scripts/test-vllm.sh's venv).

Every wait is bounded: a process that does not answer in time is killed and reported with the
end of its log.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lmcache_resp_servers.ports import HOST, free_port
from lmcache_resp_servers.wire import command

__all__ = [
    "Engine",
    "EngineError",
    "LMCacheServer",
    "Prefetch",
    "command_calls",
    "keyspace_hits",
    "reset_stats",
    "wait_for_keys",
]

LMCACHE_START_S = 180.0
ENGINE_START_S = 600.0
# LMCache's own line per prefetch that hit (lmcache/v1/distributed/storage_manager.py).
PREFETCH_LINE = re.compile(
    r"Prefetch request completed \(L1\+L2\): (\d+)/(\d+) retained keys \((\d+) L1, (\d+) L2\) in ([\d.]+) ms "
    r"\(external_request_id=([^,)]+)")
LOG_TAIL_CHARS = 4000


class EngineError(RuntimeError):
    """A process of the stack failed, hung or said something unexpected (with its log's end)."""


@dataclass(frozen=True)
class Prefetch:
    """One "Prefetch request completed (L1+L2)" line of LMCache's server."""
    hits: int
    requested: int
    l1: int
    l2: int
    ms: float
    request_id: str


def _tail(path: Path, chars: int = LOG_TAIL_CHARS) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


def _stop_group(process: subprocess.Popen[Any], grace: float = 20.0) -> None:
    """SIGTERM to the process group (the process and whatever it started), SIGKILL after grace."""
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    except ProcessLookupError:
        pass


def _child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LMCACHE_RESP_")}
    env.update(LMCACHE_TRACK_USAGE="false", LMCACHE_DISABLE_BANNER="1", HF_HUB_OFFLINE="1",
               VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1")
    env.update(extra or {})
    return env


class LMCacheServer:
    """``lmcache server`` (LMCache's MP server) with one ``--l2-adapter``, its output in
    ``log_path``; started on construction, ready once its ZMQ port accepts connections."""

    def __init__(self, adapter: dict[str, Any], directory: Path, *, chunk_tokens: int, l1_size_gb: float = 1.0,
                 python: str | None = None, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.http_port = free_port()
        self.log_path = directory / f"lmcache-server-{self.port}.log"
        argv = [
            python or sys.executable, "-m", "lmcache.cli.main", "server", "--l1-size-gb", str(l1_size_gb),
            "--eviction-policy", "LRU", "--chunk-size", str(chunk_tokens), "--port", str(self.port),
            "--http-port", str(self.http_port), "--prometheus-port", str(free_port()),
            "--supported-transfer-mode", "engine_driven", "--l2-adapter", json.dumps(adapter),
        ]
        with open(self.log_path, "ab") as log:
            # cwd: not a source tree that could shadow the installed lmcache_resp.
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            env=_child_env(env), cwd=directory, start_new_session=True)
        try:
            self._wait_listening()
        except BaseException:
            self.stop()
            raise

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + LMCACHE_START_S
        while True:
            if self.process.poll() is not None:
                raise EngineError(f"the lmcache server exited ({self.process.returncode}):\n{self.output()[-LOG_TAIL_CHARS:]}")
            try:
                with socket.create_connection((HOST, self.port), timeout=1):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise EngineError(f"the lmcache server did not listen within {LMCACHE_START_S:g} s:\n"
                                  f"{self.output()[-LOG_TAIL_CHARS:]}")
            time.sleep(0.2)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def prefetches(self) -> list[Prefetch]:
        return [Prefetch(int(m[1]), int(m[2]), int(m[3]), int(m[4]), float(m[5]), m[6])
                for m in PREFETCH_LINE.finditer(self.output())]

    def clear_l1(self) -> None:
        """Empties LMCache's L1 (its HTTP API's ``POST /cache/clear``): the next lookup of a
        stored prefix reads it from L2."""
        request = urllib.request.Request(f"http://{HOST}:{self.http_port}/cache/clear", data=b"{}", method="POST",
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as reply:
            body = json.loads(reply.read())
        if body.get("status") != "ok":
            raise EngineError(f"LMCache's /cache/clear answered {body}")

    def stop(self) -> None:
        _stop_group(self.process)


class Engine:
    """A vLLM engine in a process of its own (``python -m lmcache_resp.bench.vllm_engine``),
    ready on construction. ``generate`` sends one greedy request and returns the engine's
    result (see vllm_engine's docstring)."""

    def __init__(self, spec: dict[str, Any], directory: Path, *, python: str | None = None,
                 env: dict[str, str] | None = None, name: str = "engine") -> None:
        self.log_path = directory / f"{name}-{os.getpid()}-{time.monotonic_ns()}.log"
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [python or sys.executable, "-m", "lmcache_resp.bench.vllm_engine", json.dumps(spec)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=_child_env(env), cwd=directory,
                start_new_session=True, text=True,
            )
        self._buffer = ""
        try:
            self.ready = self._read(ENGINE_START_S, "start")
            if self.ready.get("event") != "ready":
                raise EngineError(f"the engine did not start: {self.ready.get('error')}\n{self.log_tail()}")
        except BaseException:
            self.kill()
            raise

    def log_tail(self, chars: int = LOG_TAIL_CHARS) -> str:
        return _tail(self.log_path, chars)

    def _read(self, timeout: float, what: str) -> dict[str, Any]:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        fd = self.process.stdout.fileno()
        while "\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise EngineError(f"the engine did not answer {what} within {timeout:g} s\n{self.log_tail()}")
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16).decode()
            if not chunk:
                raise EngineError(f"the engine exited ({self.process.wait()}) during {what}\n{self.log_tail()}")
            self._buffer += chunk
        line, self._buffer = self._buffer.split("\n", 1)
        message: dict[str, Any] = json.loads(line)
        return message

    def submit(self, name: str, prompt: list[int], max_tokens: int, *, logprobs: int = 5) -> None:
        """Sends one request without waiting for it (``result`` reads its answer)."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": "generate", "name": name, "prompt": prompt,
                                             "max_tokens": max_tokens, "logprobs": logprobs}) + "\n")
        self.process.stdin.flush()

    def generate(self, name: str, prompt: list[int], max_tokens: int, *, logprobs: int = 5,
                 timeout: float = 900.0) -> dict[str, Any]:
        self.submit(name, prompt, max_tokens, logprobs=logprobs)
        return self.result(name, timeout)

    def result(self, name: str, timeout: float = 900.0) -> dict[str, Any]:
        result = self._read(timeout, f"request {name}")
        if result.get("event") != "result":
            raise EngineError(f"request {name} failed: {result.get('error')}\n{self.log_tail()}")
        return result

    def close(self, timeout: float = 60.0) -> None:
        """Asks the engine to shut down; kills it when it does not within ``timeout``."""
        if self.process.poll() is None and self.process.stdin is not None:
            try:
                self.process.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.process.stdin.flush()
                self.process.wait(timeout=timeout)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                pass
        self.kill()

    def kill(self) -> None:
        _stop_group(self.process, grace=10.0)


# -- what the server counted -------------------------------------------------------------------


def _info(port: int, section: str) -> str:
    reply = command(port, "INFO", section)
    return reply.decode(errors="replace") if isinstance(reply, bytes) else ""


def command_calls(port: int) -> dict[str, int]:
    """INFO commandstats: calls per command (lower case) since start or the last reset_stats."""
    calls = {}
    for line in _info(port, "commandstats").splitlines():
        if line.startswith("cmdstat_"):
            name, _, fields = line[len("cmdstat_"):].partition(":")
            values = dict(part.split("=", 1) for part in fields.split(",") if "=" in part)
            calls[name.lower()] = int(values.get("calls", 0))
    return calls


def keyspace_hits(port: int) -> tuple[int, int]:
    """INFO stats: (keyspace_hits, keyspace_misses)."""
    values = dict(line.split(":", 1) for line in _info(port, "stats").splitlines() if ":" in line)
    return int(values.get("keyspace_hits", 0)), int(values.get("keyspace_misses", 0))


def reset_stats(port: int) -> None:
    command(port, "CONFIG", "RESETSTAT")


def dbsize(port: int) -> int:
    reply = command(port, "DBSIZE")
    return int(reply) if isinstance(reply, int) else 0


def wait_for_keys(port: int, expected: int, timeout: float = 120.0, settle: float = 1.0) -> int:
    """Waits until the server holds ``expected`` keys (LMCache writes L1 to L2 in the background
    after a request) and the count has not moved for ``settle`` seconds; returns the count."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while True:
        count = dbsize(port)
        if count != last:
            last, since = count, time.monotonic()
        if count >= expected and time.monotonic() - since >= settle:
            return count
        if time.monotonic() > deadline:
            raise EngineError(f"the server holds {count} keys, {expected} expected, {timeout:g} s after the request")
        time.sleep(0.05)
