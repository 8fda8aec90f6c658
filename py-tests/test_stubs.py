"""The hand-written stub of the native module matches the built module: exactly the release
build's surface (_native.pyi declares no test hook), and the development build's less exactly
its test hooks (lmcache_resp_testing.hooks). scripts/check-wheel.sh checks the release wheel
itself with no allowance at all."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lmcache_resp import _native
from lmcache_resp_testing import hooks, stub_surface

REPO = Path(__file__).resolve().parents[1]
STUB = REPO / "lmcache_resp" / "_native.pyi"
TESTING = REPO / "testing"
# What the wheel holds: the package, and the throwaway-server launcher beside it.
SHIPPED = ("lmcache_resp", "lmcache_resp_servers")


def shipped_sources() -> list[Path]:
    """Every Python source and stub of the packages the wheel holds."""
    return [path for package in SHIPPED for suffix in ("*.py", "*.pyi")
            for path in sorted((REPO / package).rglob(suffix))]


def test_the_development_build_has_the_test_hooks() -> None:
    """scripts/setup.sh builds .venv with the test-hooks feature; the checks below allow exactly
    the hooks, so they must all be there (the suites use them)."""
    assert hooks.has_hooks(), "build with `maturin develop --release --features python,test-hooks`"


def test_stubtest_native_module(tmp_path: Path) -> None:
    """Signatures and public names. stubtest sees one hook of the development build (the
    module's __all__ lists its functions): exactly that, and the __all__ that lists it, are
    allowed; test_the_stub_names_exactly_what_the_module_has checks __all__ less the hooks."""
    allowlist = tmp_path / "stubtest-allowlist.txt"
    allowlist.write_text("".join(f"lmcache_resp._native.{name}\n" for name in ["__all__", *sorted(hooks.HOOKS[""])]))
    # stubtest fails on an allowlist entry it did not need: the allowance is exactly the hooks.
    result = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "lmcache_resp._native", "--allowlist", str(allowlist)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_stub_names_exactly_what_the_module_has() -> None:
    """Private names too (stubtest passes over them): __all__, the module's names, each class's
    members; the development build's test hooks, and nothing else, are left out of the stub."""
    assert stub_surface.differences(_native, STUB, hooks.HOOKS) == []


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (("    def stats(self) -> dict[str, Any]: ...\n", ""), "at runtime, not in the stub: ['stats']"),
        (("def _log_wait(timeout: float) -> bool: ...\n",
          "def _log_wait(timeout: float) -> bool: ...\ndef _log_flood_for_test(count: int, target: str) -> float: ...\n"),
         "the stub declares test hooks"),
        (('    "_log_wait",\n', ""), "__all__: at runtime, not in the stub: ['_log_wait']"),
        (("MAX_KEY_LEN: int\n", "MAX_KEY_LEN: int\nMAX_VALUE_LEN: int\n"), "in the stub, not at runtime: ['MAX_VALUE_LEN']"),
    ],
    ids=["a-method-missing", "a-hook-declared", "all-short", "a-name-too-many"],
)
def test_the_name_check_sees_a_stub_that_drifted(change: tuple[str, str], problem: str, tmp_path: Path) -> None:
    old, new = change
    text = STUB.read_text()
    assert old in text
    drifted = tmp_path / "_native.pyi"
    drifted.write_text(text.replace(old, new, 1))
    found = stub_surface.differences(_native, drifted, hooks.HOOKS)
    assert any(problem in line for line in found), found


def test_the_release_check_refuses_a_build_with_hooks() -> None:
    """What scripts/check-wheel.sh runs on the release wheel, here on the development build: it
    must fail, naming the hooks."""
    result = subprocess.run([sys.executable, "-m", "lmcache_resp_testing.stub_surface", "--release"],
                            capture_output=True, text=True, cwd=REPO, env=_with_testing())
    assert result.returncode == 1, result.stdout + result.stderr
    assert "a release build has test hooks" in result.stdout and "_corrupt_ring_for_test" in result.stdout


def _with_testing() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTING), os.environ.get("PYTHONPATH")]))}


# LMCache runs on Python 3.10 to 3.13: the package and its stub must not use what 3.11 added
# (typing.Self, tomllib, ExceptionGroup, asyncio.TaskGroup/timeout, datetime.UTC, StrEnum, ...).
# mypy checks the library calls against typeshed's versions for the target; the parse below
# checks the syntax with 3.10's grammar, as no 3.10 interpreter is at hand here.
OLDEST_PYTHON = (3, 10)


@pytest.mark.parametrize("target", [None, OLDEST_PYTHON], ids=["this-python", "py3.10"])
def test_package_type_checks(target: tuple[int, int] | None) -> None:
    """The packages the wheel holds, and the test-support package beside them (testing/, on MYPYPATH)."""
    version = [] if target is None else ["--python-version", "%d.%d" % target]
    packages = [arg for package in (*SHIPPED, "lmcache_resp_testing") for arg in ("-p", package)]
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", *version, *packages],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "MYPYPATH": str(TESTING)},
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
    """Where a 3.10 is installed, its own compiler reads every file of the packages the wheel
    holds (nothing is written: no __pycache__ left behind)."""
    python = python_3_10()
    if python is None:
        pytest.skip("no CPython 3.10 here (PATH or pyenv): the grammar check below still runs")
    script = (
        "import pathlib, sys\n"
        "files = [pathlib.Path(name) for name in sys.argv[1:]]\n"
        "for path in files: compile(path.read_text(), str(path), 'exec', dont_inherit=True)\n"
        "print(sys.version_info[:2], len(files))\n"
    )
    files = [str(path) for path in shipped_sources()]
    result = subprocess.run([python, "-I", "-c", script, *files], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    version, count = result.stdout.rsplit(")", 1)
    assert version == "(3, 10" and int(count) > 20, result.stdout


def test_package_parses_with_the_oldest_supported_grammar() -> None:
    files = shipped_sources()
    assert len(files) > 20 and any(path.parent.name == "lmcache_resp_servers" for path in files)
    for path in files:
        # Raises SyntaxError for what 3.10 cannot parse (except*, PEP 695 generics, ...).
        ast.parse(path.read_text(), filename=str(path), feature_version=OLDEST_PYTHON)


def settings_kwargs_problems(typing_source: str) -> list[str]:
    """How ``SettingsKwargs`` in ``typing_source`` (the text of _typing.py) differs from the
    settings' table (rust/src/settings/table.rs, as ``_native.Settings.table``): each setting a
    key typed as its row's ``accepts`` plus ``| None``, and no other key."""
    tree = ast.parse(typing_source)
    kwargs = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "SettingsKwargs")
    declared = {
        item.target.id: ast.unparse(item.annotation)
        for item in kwargs.body if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
    }
    problems = []
    for name, accepts, *_ in _native.Settings.table:
        if name not in declared:
            problems.append(f"{name}: missing from SettingsKwargs in lmcache_resp/_typing.py (as {accepts} | None)")
        elif declared[name] != f"{accepts} | None":
            problems.append(f"{name}: SettingsKwargs says {declared[name]}, the table accepts {accepts} | None")
    problems += [f"{name}: in SettingsKwargs, not a setting" for name in declared.keys() - set(_native.Settings.fields)]
    return problems


def stub_getter_problems(stub_source: str) -> list[str]:
    """Each setting a property of ``Settings`` in ``stub_source`` (the text of _native.pyi)."""
    tree = ast.parse(stub_source)
    settings = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "Settings")
    properties = {
        item.name for item in settings.body
        if isinstance(item, ast.FunctionDef) and any(ast.unparse(d) == "property" for d in item.decorator_list)
    }
    return [f"{name}: no property of Settings in lmcache_resp/_native.pyi" for name in _native.Settings.fields
            if name not in properties]


TYPING = REPO / "lmcache_resp" / "_typing.py"


def test_keyword_settings_are_the_tables() -> None:
    """Each setting is declared once, as a row of the core's table (settings/table.rs); the typed
    keyword list the package offers (SettingsKwargs) must name each, typed as its row says."""
    assert settings_kwargs_problems(TYPING.read_text()) == []


def test_every_setting_has_a_getter_in_the_stub_and_at_runtime() -> None:
    """The getters are made from the table when the module loads; the stub declares each (and
    stubtest, above, checks that it says what the module has)."""
    assert stub_getter_problems(STUB.read_text()) == []
    settings = _native.Settings()
    for name in _native.Settings.fields:
        assert isinstance(getattr(_native.Settings, name), property), name
        getattr(settings, name)
    assert list(settings.to_dict()) == ["endpoints", *_native.Settings.fields]


@pytest.mark.parametrize("document", ["typing", "stub"])
def test_the_checks_name_a_setting_missing_from_the_typing_or_the_stub(document: str) -> None:
    """A row that lacks its line fails, named: io_backend's line taken out of each file."""
    if document == "typing":
        text = TYPING.read_text()
        line = "    io_backend: str | None\n"
        assert line in text
        assert settings_kwargs_problems(text.replace(line, "")) == [
            "io_backend: missing from SettingsKwargs in lmcache_resp/_typing.py (as str | None)"]
        assert settings_kwargs_problems(text.replace(line, "    io_backend: int | None\n")) == [
            "io_backend: SettingsKwargs says int | None, the table accepts str | None"]
    else:
        text = STUB.read_text()
        lines = "    @property\n    def io_backend(self) -> Literal[\"auto\", \"uring\", \"poll\"]: ...\n"
        assert lines in text
        assert stub_getter_problems(text.replace(lines, "")) == [
            "io_backend: no property of Settings in lmcache_resp/_native.pyi"]


def test_valkey_adapter_names_are_the_native_ones() -> None:
    """LMCache's valkey-adapter names are listed once, in the core (settings/valkey.rs); the
    typed list (ValkeyAdapterKwargs) names exactly those, and each means one of our fields."""
    from typing import get_type_hints

    from lmcache_resp import _native
    from lmcache_resp._typing import ValkeyAdapterKwargs

    assert set(get_type_hints(ValkeyAdapterKwargs)) == {alias for alias, _ in _native.Settings.valkey_fields}
    assert {ours for _, ours in _native.Settings.valkey_fields} <= set(_native.Settings.fields)
