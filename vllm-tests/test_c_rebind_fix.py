"""vLLM 0.32's ``_rebind_kernels`` crash with LMCache's connector, and the plugin that works around
it (examples/vllm/rebind-fix): without the plugin (``VLLM_PLUGINS`` naming another one, so vLLM
loads none of ours) the engine does not start, for exactly that reason; every other test of this
suite starts its engines with it (and test_a checks its line in the engine's log). The scan
itself, with numba loaded: vLLM's fails, the plugin's returns."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lmcache_resp.bench.vllm_stack import EngineError
from lmcache_resp_testing.servers import RedisServer
from vllm_helpers import adapter, phase


def test_without_the_plugin_the_engine_fails_in_rebind_kernels(redis: RedisServer, model: Path,
                                                              tmp_path: Path) -> None:
    with pytest.raises(EngineError) as failure:
        with phase(adapter("ours", redis), model, tmp_path, engine_env={"VLLM_PLUGINS": "no-such-plugin"}):
            pass
    log = str(failure.value)
    engine_log = "".join(path.read_text(errors="replace") for path in tmp_path.glob("engine-*.log"))
    assert "_rebind_kernels" in engine_log, log[-2000:]
    assert "'_lib_fn_wrapper' object has no attribute 'get'" in engine_log, log[-2000:]
    assert "vllm_rebind_fix" not in engine_log


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
