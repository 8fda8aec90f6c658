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


def test_keyword_settings_are_the_native_fields() -> None:
    """The settings' keyword names are listed once, in the core (settings/names.rs); the typed
    keyword list the package offers (SettingsKwargs) must name exactly those."""
    from typing import get_type_hints

    from lmcache_resp import _native
    from lmcache_resp._typing import SettingsKwargs

    assert set(get_type_hints(SettingsKwargs)) == set(_native.Settings.fields)
