"""Helpers for the tests against a real LMCache, 0.5.6 or 0.5.7rc2 (run by scripts/test-lmcache.sh only).

Every test talks to a real, throwaway redis-server on a free port (never 6379), started by
the test-support package every suite uses (testing/lmcache_resp_testing, on the path through
pyproject.toml's pytest ``pythonpath``), on the launcher of the installed lmcache_resp: this
venv runs the built package, not the source tree.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lmcache_resp_servers import RedisServer, free_port
from lmcache_resp_testing import pattern

__all__ = [
    "ADAPTER_CREATED",
    "EXAMPLE_HOST",
    "EXAMPLE_PORT",
    "REPO",
    "RESP_ENV",
    "RedisServer",
    "bridge_example",
    "free_port",
    "load_mp_example",
    "load_non_mp_example",
    "pattern",
    "run_on",
    "stop_process_group",
]

# Before LMCache is imported anywhere: no usage telemetry from test runs.
os.environ["LMCACHE_TRACK_USAGE"] = "false"
os.environ.setdefault("LMCACHE_DISABLE_BANNER", "1")

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "lmcache"
MP_EXAMPLE = EXAMPLES / "mp-l2-adapter.json"
NON_MP_EXAMPLE = EXAMPLES / "non-mp.yaml"
BRIDGE_EXAMPLE = REPO / "examples" / "bridge" / "mp-l2-adapter-bridge.json"

# What the examples name; the tests swap only the port (see load_mp_example/load_non_mp_example).
EXAMPLE_HOST = "127.0.0.1"
EXAMPLE_PORT = 6379


def _adapter_created() -> str:
    """What LMCache's MP server logs once it has built the examples' connector: the module path
    they name (lmcache_resp.lmcache.mp) and the class."""
    document = json.loads(MP_EXAMPLE.read_text())
    return f"Created native plugin L2 adapter: {document['module_path']}.{document['class_name']}"


ADAPTER_CREATED = _adapter_created()

RESP_ENV = ("LMCACHE_RESP_HOST", "LMCACHE_RESP_PORT", "LMCACHE_RESP_USERNAME", "LMCACHE_RESP_PASSWORD")


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


@contextmanager
def bridge_example(port: int, directory: Path, *, num_pages: int, extra: tuple[str, ...] = ()) -> Iterator[dict[str, Any]]:
    """examples/bridge/mp-l2-adapter-bridge.json, its socket a bridge (``python -m
    lmcache_resp.bridge`` of 1 MiB pages) that runs in ``directory`` against the redis-server on
    ``port`` for as long as the context lasts."""
    socket_path = directory / "bridge.sock"
    bridge = subprocess.Popen(
        [sys.executable, "-m", "lmcache_resp.bridge", "--url", f"redis://127.0.0.1:{port}",
         "--socket", str(socket_path), "--page-size", str(1 << 20), "--num-pages", str(num_pages),
         "--num-workers", "2", *extra],
        cwd=directory, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not socket_path.exists():
            assert bridge.poll() is None and time.monotonic() < deadline, "the bridge did not start"
            time.sleep(0.05)
        document = json.loads(BRIDGE_EXAMPLE.read_text())
        assert document["adapter_params"] == {"bridge": "/run/lmcache-resp/bridge.sock"}
        document["adapter_params"]["bridge"] = str(socket_path)
        yield document
    finally:
        bridge.terminate()
        bridge.wait(30)


def stop_process_group(process: subprocess.Popen[bytes], grace: float = 30) -> None:
    """Ends a server started in a session of its own (``start_new_session=True``), with every
    process it started: SIGTERM to the group, SIGKILL once ``grace`` seconds have passed."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
