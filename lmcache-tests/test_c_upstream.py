"""(c) LMCache's own tests (0.5.6's, or 0.5.7rc2's), with lmcache-resp substituted (see
upstream_substitute.py).

scripts/test-lmcache.sh unpacks the installed LMCache's sdist and points ``LMCACHE_UPSTREAM_TESTS`` at
a directory holding its ``tests/`` tree and ``pytest.ini`` (without the ``lmcache`` sources, so
the installed wheel is what runs). Each file runs in its own pytest process against this
session's throwaway redis-server.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from lmc_helpers import RedisServer

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

# file -> the substitution that must have happened in it, and its test count (the same in
# LMCache 0.5.6 and 0.5.7rc2)
UPSTREAM = {
    "tests/v1/distributed/test_resp_l2_adapter_integration.py": ("RespConnector (for LMCacheRedisClient)", 7),
    "tests/v1/distributed/test_native_connector_l2_adapter.py": ("RespConnector (for MockNativeConnector)", 92),
    "tests/v1/storage_backend/test_resp_connector.py": ("RespRemoteConnector (for resp:// RESPConnector)", 11),
}


@pytest.fixture(scope="module")
def upstream() -> Path:
    where = os.environ.get("LMCACHE_UPSTREAM_TESTS")
    if not where:
        pytest.skip("LMCACHE_UPSTREAM_TESTS is not set: scripts/test-lmcache.sh provides LMCache's tests")
    path = Path(where)
    assert (path / "tests").is_dir() and not (path / "lmcache").exists()
    return path


@pytest.mark.parametrize("test_file", sorted(UPSTREAM))
def test_lmcaches_tests_pass_over_lmcache_resp(upstream: Path, redis_server: RedisServer, test_file: str) -> None:
    substitution, count = UPSTREAM[test_file]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH", "")])),
        "LMCACHE_RESP_TEST_PORT": str(redis_server.port),
        "REDIS_HOST": "127.0.0.1",  # read by test_resp_l2_adapter_integration.py
        "REDIS_PORT": str(redis_server.port),
        "LMCACHE_TRACK_USAGE": "false",
    }
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "upstream_substitute",
         "-o", "log_cli=false", "-W", "ignore::FutureWarning", "-W", "ignore::DeprecationWarning", test_file],
        cwd=upstream, env=env, capture_output=True, text=True, timeout=900,
    )
    output = result.stdout + result.stderr
    summary = "\n".join(line for line in output.splitlines() if re.search(r"passed|failed|error|substituted", line))
    print(summary)
    assert result.returncode == 0, output[-8000:]
    assert re.search(rf"\b{count} passed\b", output), summary
    assert not re.search(r"\d+ (failed|error)", output), summary
    built = re.search(rf"lmcache-resp substituted: (\d+) x {re.escape(substitution)}", output)
    assert built and int(built.group(1)) > 0, summary
