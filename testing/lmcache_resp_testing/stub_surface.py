"""Whether ``lmcache_resp/_native.pyi`` declares exactly what the built native module has, name
by name, private names included (``mypy.stubtest`` checks signatures but passes over private
names; this reads them all): the module's ``__all__``, its names, and each class's own members.

A release build must match exactly. A build with the ``test-hooks`` feature has, besides, the
hooks in :data:`lmcache_resp_testing.hooks.HOOKS`, and nothing else. py-tests/test_stubs.py runs
this against the development build, scripts/check-wheel.sh against the release wheel::

    python -m lmcache_resp_testing.stub_surface --release     # exit 1, saying what differs

Only the standard library at import time: the module under test is imported by the caller (or
by ``main``), from wherever the caller's path finds it.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["differences", "main", "stub_names"]

# What Python or PyO3 puts on every module and class: not the stub's to declare.
_IMPLICIT = frozenset({"__doc__", "__module__", "__name__", "__qualname__", "__file__", "__loader__",
                       "__package__", "__spec__", "__builtins__", "__cached__", "__all__", "__dict__",
                       "__weakref__", "__text_signature__"})


def _declared(body: Sequence[ast.stmt]) -> set[str]:
    """The names a stub body declares: functions, classes, annotated and assigned names (its
    imports, including those under ``if sys.version_info``, are not declarations)."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
    return names - {"__all__"}


def stub_names(stub: Path) -> tuple[list[str], set[str], dict[str, set[str]]]:
    """The stub's ``__all__``, its module-level names, and each class's member names."""
    tree = ast.parse(stub.read_text(), filename=str(stub))
    exported: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            exported = list(ast.literal_eval(node.value))
    classes = {node.name: _declared(node.body) for node in tree.body if isinstance(node, ast.ClassDef)}
    return exported, _declared(tree.body), classes


def _runtime_names(module: ModuleType) -> tuple[list[str], set[str], dict[str, set[str]]]:
    names = {name for name in vars(module) if name not in _IMPLICIT}
    classes = {
        name: {member for member in vars(value) if member not in _IMPLICIT}
        for name, value in vars(module).items() if isinstance(value, type) and value.__module__ == module.__name__
    }
    return list(getattr(module, "__all__", [])), names, classes


def differences(module: ModuleType, stub: Path, hooks: Mapping[str, frozenset[str]]) -> list[str]:
    """What differs between ``module`` and ``stub``, beyond ``hooks`` (owner "" for the module,
    else a class name -> hook names), which the module must have all of or none of, and the
    stub none of."""
    want_all, want_names, want_classes = stub_names(stub)
    have_all, have_names, have_classes = _runtime_names(module)
    present = {owner: {n for n in names if n in (have_classes.get(owner, set()) if owner else have_names)}
               for owner, names in hooks.items()}
    found = [f"{owner or 'module'}.{name}" for owner, names in present.items() for name in sorted(names)]
    expected = [f"{owner or 'module'}.{name}" for owner, names in hooks.items() for name in sorted(names)]
    problems = []
    if found and found != expected:
        problems.append(f"the module has some test hooks but not all: {found}, not {expected}")
    declared_hooks = [f"{owner or 'module'}.{n}" for owner, names in hooks.items()
                      for n in sorted(names & (want_classes.get(owner, set()) if owner else want_names))]
    if declared_hooks or set(hooks.get("", frozenset())) & set(want_all):
        problems.append(f"the stub declares test hooks, which release builds lack: {declared_hooks}")

    def compare(what: str, have: set[str], want: set[str]) -> None:
        if have - want:
            problems.append(f"{what}: at runtime, not in the stub: {sorted(have - want)}")
        if want - have:
            problems.append(f"{what}: in the stub, not at runtime: {sorted(want - have)}")

    compare("__all__", set(have_all) - present.get("", set()), set(want_all))
    compare("module names", have_names - present.get("", set()), want_names)
    compare("classes", set(have_classes), set(want_classes))
    for name in sorted(set(have_classes) & set(want_classes)):
        # A stub declares the dunders it means (__new__, __eq__, ...); the runtime's others
        # (__repr__, __getattribute__...) come from PyO3 and are the base class's business.
        have = {m for m in have_classes[name] if not m.startswith("__") or m in want_classes[name]}
        compare(f"class {name}", have - present.get(name, set()), want_classes[name])
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lmcache_resp_testing.stub_surface", description=__doc__)
    parser.add_argument("--release", action="store_true", help="no test hooks may be present")
    args = parser.parse_args(argv)
    from lmcache_resp_testing.hooks import HOOKS

    native = importlib.import_module("lmcache_resp._native")
    stub = Path(str(native.__file__)).with_name("_native.pyi")
    problems = differences(native, stub, {} if args.release else HOOKS)
    if args.release:
        leftover = [f"{owner or 'module'}.{name}" for owner, names in HOOKS.items() for name in sorted(names)
                    if hasattr(getattr(native, owner) if owner else native, name)]
        if leftover:
            problems.append(f"a release build has test hooks: {leftover}")
    print(f"{native.__file__} against {stub}: " + ("; ".join(problems) if problems else "the same names"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
