"""vLLM 0.32's ``_rebind_kernels`` crash with LMCache's connector, and the plugin that works around
it (examples/vllm/rebind-fix): with the engine core in the engine's process and without the
plugin (``VLLM_PLUGINS`` naming another one, so vLLM loads none of ours) the engine does not
start, for exactly that reason; with it, it serves. The scan itself, with numba loaded: vLLM's
fails, the plugin's returns. Every other test of this suite starts its engines with the plugin
(test_a checks its line in the engine's log)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lmcache_resp.bench.vllm_stack import EngineError
from lmcache_resp_servers import RedisServer
from vllm_helpers import adapter, phase, prompt


# The engine core in the engine's own process: its worker is then forked from a process that has
# imported LMCache's connector, and numba with it. (With the engine core in a process of its own,
# vLLM's default, the worker is started before that process imports the connector, and the scan
# passes: see docs/upstream/vllm-rebind-kernels.md.)
IN_PROCESS_CORE = {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def test_without_the_plugin_an_in_process_engine_core_fails_in_rebind_kernels(redis: RedisServer, model: Path,
                                                                              tmp_path: Path) -> None:
    with pytest.raises(EngineError) as failure:
        with phase(adapter("ours", redis), model, tmp_path, engine_env={**IN_PROCESS_CORE,
                                                                       "VLLM_PLUGINS": "no-such-plugin"}):
            pass
    engine_log = "".join(path.read_text(errors="replace") for path in tmp_path.glob("engine-*.log"))
    assert "_rebind_kernels" in engine_log, str(failure.value)[-2000:]
    assert "'_lib_fn_wrapper' object has no attribute 'get'" in engine_log, str(failure.value)[-2000:]
    assert "vllm_rebind_fix" not in engine_log


def test_with_the_plugin_an_in_process_engine_core_serves(redis: RedisServer, model: Path, tmp_path: Path) -> None:
    """The same engine as above, the plugin loaded: it starts and serves."""
    with phase(adapter("ours", redis), model, tmp_path, engine_env=IN_PROCESS_CORE) as p:
        result = p.run("short", prompt(300, seed=5), 2)
        log = p.engine.log_path.read_text(errors="replace")
    assert len(result["tokens"]) == 2
    assert "has no attribute 'get'" not in log


REPRODUCTION = """
import numba  # noqa: F401  (what LMCache's connector imports)
import sys
from vllm.triton_utils import dispatcher
import vllm_rebind_fix
scan = dispatcher._rebind_kernels if sys.argv[1] == "vllm" else vllm_rebind_fix.rebind_kernels
scan([(object(), object())])
print("returned")
"""


@pytest.mark.parametrize("scan", ["vllm", "fixed"])
def test_the_scan_itself_with_numba_loaded(scan: str, tmp_path: Path) -> None:
    """docs/upstream/vllm-rebind-kernels.md's reproduction: vLLM's scan fails, the plugin's returns."""
    done = subprocess.run([sys.executable, "-c", REPRODUCTION, scan], capture_output=True, text=True, timeout=600,
                          cwd=tmp_path)
    if scan == "vllm":
        assert done.returncode != 0
        assert "AttributeError: '_lib_fn_wrapper' object has no attribute 'get'" in done.stderr, done.stderr[-2000:]
    else:
        assert done.returncode == 0, done.stderr[-2000:]
        assert "returned" in done.stdout
