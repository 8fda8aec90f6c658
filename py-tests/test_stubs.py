"""The hand-written stub of the native module matches the built module."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_stubtest_native_module() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "lmcache_resp._native", "--ignore-missing-stub"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# LMCache runs on Python 3.10 to 3.13: the package and its stub must not use what 3.11 added
# (typing.Self, tomllib, ExceptionGroup, asyncio.TaskGroup/timeout, datetime.UTC, StrEnum, ...).
# mypy checks the library calls against typeshed's versions for the target; the parse below
# checks the syntax with 3.10's grammar, as no 3.10 interpreter is at hand here.
OLDEST_PYTHON = (3, 10)


@pytest.mark.parametrize("target", [None, OLDEST_PYTHON], ids=["this-python", "py3.10"])
def test_package_type_checks(target: tuple[int, int] | None) -> None:
    version = [] if target is None else ["--python-version", "%d.%d" % target]
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", *version, "-p", "lmcache_resp"],
        capture_output=True, text=True, cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def python_3_10() -> str | None:
    """A CPython 3.10 on this machine (PATH, else pyenv's), as scripts/check-wheel.sh finds one."""
    import glob
    import os
    import shutil

    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    for candidate in [shutil.which("python3.10"), *sorted(glob.glob(f"{pyenv}/versions/3.10.*/bin/python3.10"))]:
        # pyenv's shim is on PATH even where no 3.10 is selected: it must run.
        if candidate and subprocess.run([candidate, "-c", "pass"], capture_output=True).returncode == 0:
            return candidate
    return None


def test_package_compiles_under_python_3_10() -> None:
    """Where a 3.10 is installed, its own compiler reads every file of the package (nothing is
    written: no __pycache__ left behind)."""
    python = python_3_10()
    if python is None:
        pytest.skip("no CPython 3.10 here (PATH or pyenv): the grammar check below still runs")
    script = (
        "import pathlib, sys\n"
        "files = sorted(pathlib.Path(sys.argv[1]).rglob('*.py')) + sorted(pathlib.Path(sys.argv[1]).rglob('*.pyi'))\n"
        "for path in files: compile(path.read_text(), str(path), 'exec', dont_inherit=True)\n"
        "print(sys.version_info[:2], len(files))\n"
    )
    result = subprocess.run([python, "-I", "-c", script, str(REPO / "lmcache_resp")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    version, count = result.stdout.rsplit(")", 1)
    assert version == "(3, 10" and int(count) > 20, result.stdout


def test_package_parses_with_the_oldest_supported_grammar() -> None:
    files = sorted((REPO / "lmcache_resp").rglob("*.py")) + sorted((REPO / "lmcache_resp").rglob("*.pyi"))
    assert len(files) > 20
    for path in files:
        # Raises SyntaxError for what 3.10 cannot parse (except*, PEP 695 generics, ...).
        ast.parse(path.read_text(), filename=str(path), feature_version=OLDEST_PYTHON)


def test_keyword_settings_are_the_native_fields() -> None:
    """The settings' keyword names are listed once, in the core (settings/names.rs); the typed
    keyword list the package offers (SettingsKwargs) must name exactly those."""
    from typing import get_type_hints

    from lmcache_resp import _native
    from lmcache_resp._typing import SettingsKwargs

    assert set(get_type_hints(SettingsKwargs)) == set(_native.Settings.fields)
