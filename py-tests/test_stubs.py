"""The hand-written stub of the native module matches the built module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_stubtest_native_module() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "lmcache_resp._native", "--ignore-missing-stub"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_package_type_checks() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "-p", "lmcache_resp"], capture_output=True, text=True, cwd=REPO
    )
    assert result.returncode == 0, result.stdout + result.stderr
