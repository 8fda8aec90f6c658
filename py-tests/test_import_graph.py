"""No module of lmcache_resp imports itself back through others: the package's import graph is a
DAG (shared pieces live in modules of their own, below everything that uses them: the bench's
options.py and errors.py, the package's errors.py and settings.py). Imports inside functions and
``if TYPE_CHECKING:`` blocks count too: a circle there is a circle a reader must untangle. The
same holds for lmcache_resp_servers, the throwaway-server launcher beside it in the wheel, which
imports the standard library and nothing else (the benchmark imports it, never the other way),
and for the test-support package's command line, which the Rust tests run before anything is
built.

Importing a submodule runs its parent packages' ``__init__`` first; that is Python's doing, not
an edge (``from lmcache_resp import RespSettings`` is one: it needs the package's __init__).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "lmcache_resp"
LAUNCHER = "lmcache_resp_servers"
TEST_SUPPORT = "lmcache_resp_testing"
# What the test-support package's command line (python -m lmcache_resp_testing) imports.
TEST_SUPPORT_CLI = ("__init__", "__main__", "cli", "certs", "servers")


def module_names(package: str = PACKAGE) -> dict[str, Path]:
    """Every module of ``package`` (lmcache_resp, lmcache_resp_servers) by dotted name (a package
    by its own name: its __init__), the native module by its stub."""
    package_dir = REPO / package
    modules: dict[str, Path] = {}
    for path in sorted(package_dir.rglob("*.py")) + sorted(package_dir.glob("_native.pyi")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def imported_names(path: Path) -> list[tuple[str, list[str]]]:
    """``(module, names)`` per import statement anywhere in the file: ``import a.b`` is
    ``("a.b", [])``, ``from a import b, c`` is ``("a", ["b", "c"])``."""
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: a relative import; this check reads absolute ones"
            assert node.module is not None
            found.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            found += [(alias.name, []) for alias in node.names]
    return found


def package_imports(package: str = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports. ``from lmcache_resp.bench import pattern``
    imports the module ``lmcache_resp.bench.pattern``; ``from lmcache_resp import RespSettings``
    imports ``lmcache_resp`` itself."""
    modules = module_names(package)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        for module, names in imported_names(path):
            if module != package and not module.startswith(package + "."):
                continue
            targets = [f"{module}.{n}" for n in names if f"{module}.{n}" in modules]
            if len(targets) < len(names) or not names:
                # A name that is no module of ours is an attribute of ``module``, which must be one.
                while module not in modules:
                    module = module.rsplit(".", 1)[0]
                targets.append(module)
            edges |= set(targets)
        graph[name] = edges - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    done: set[str] = set()
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return None
        path.append(module)
        for imported in sorted(graph[module]):
            cycle = visit(imported)
            if cycle:
                return cycle
        path.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        cycle = visit(module)
        if cycle:
            return cycle
    return None


def test_the_checker_sees_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_graph_resolves_submodules_and_attributes() -> None:
    graph = package_imports()
    assert {"lmcache_resp", "lmcache_resp.lmcache", "lmcache_resp.lmcache.mp", "lmcache_resp._native",
            "lmcache_resp.bench.target"} <= set(graph)
    # ``from lmcache_resp import _native, metrics``: two modules; ``... import RespSettings``: the package.
    assert {"lmcache_resp._native", "lmcache_resp.metrics"} <= graph["lmcache_resp.client"]
    assert "lmcache_resp" in graph["lmcache_resp.bench.cli"]
    assert "lmcache_resp.lmcache.mp" in graph["lmcache_resp.lmcache.non_mp"]


@pytest.mark.parametrize("package", [PACKAGE, LAUNCHER])
def test_the_package_imports_form_a_dag(package: str) -> None:
    graph = package_imports(package)
    assert len(graph) > 10, graph
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


def test_the_launchers_modules_import_those_below_them_not_the_package() -> None:
    """``from lmcache_resp_servers import X`` in one of its own modules would run the package's
    __init__, which imports every module: a circle."""
    graph = package_imports(LAUNCHER)
    assert {"lmcache_resp_servers.server", "lmcache_resp_servers.cluster", "lmcache_resp_servers.sentinel"} <= set(graph)
    assert "lmcache_resp_servers.server" in graph["lmcache_resp_servers.cluster"]
    importers = [m for m, edges in graph.items() if LAUNCHER in edges]
    assert importers == [], importers


def foreign_imports(path: Path, allowed: set[str]) -> list[str]:
    """The modules ``path`` imports that are neither the standard library nor under ``allowed``."""
    return [
        module for module, _ in imported_names(path)
        if module.split(".")[0] not in sys.stdlib_module_names and module.split(".")[0] not in allowed
    ]


def test_the_launcher_imports_the_standard_library_only() -> None:
    """Nothing of lmcache_resp (so no compiled module) and no third-party package: the benchmark,
    the suites and the Rust tests start servers with it before, or without, anything built."""
    modules = module_names(LAUNCHER)
    assert len(modules) > 10, modules
    for name, path in modules.items():
        assert foreign_imports(path, {LAUNCHER}) == [], name


def test_the_test_support_command_line_needs_only_the_launcher() -> None:
    """``python -m lmcache_resp_testing``, which the Rust tests start every server with: the
    standard library, the launcher and its own modules, never lmcache_resp."""
    for name in TEST_SUPPORT_CLI:
        path = REPO / "testing" / TEST_SUPPORT / f"{name}.py"
        foreign = foreign_imports(path, {LAUNCHER, TEST_SUPPORT})
        assert foreign == [], f"{name}.py imports {foreign}"
        own = {module for module, _ in imported_names(path) if module.split(".")[0] == TEST_SUPPORT}
        assert own <= {TEST_SUPPORT, *(f"{TEST_SUPPORT}.{m}" for m in TEST_SUPPORT_CLI)}, f"{name}.py imports {own}"


def test_the_checks_see_a_foreign_import(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text("import os\nfrom lmcache_resp import _native\ndef f():\n    import numpy\n")
    assert foreign_imports(module, {LAUNCHER}) == ["lmcache_resp", "numpy"]


def test_a_cycle_through_the_package_init_is_caught() -> None:
    """What a module below the package's __init__ must not do: import from the package itself."""
    graph = package_imports()
    graph["lmcache_resp.settings"] = graph["lmcache_resp.settings"] | {"lmcache_resp"}
    cycle = find_cycle(graph)
    assert cycle is not None and "lmcache_resp" in cycle and "lmcache_resp.settings" in cycle


def test_the_bench_command_line_is_the_top_of_the_bench() -> None:
    # Nothing imports the command line: it is the top, above the run it starts.
    graph = package_imports()
    assert {"lmcache_resp.bench.cli", "lmcache_resp.bench.options", "lmcache_resp.bench.errors"} <= set(graph)
    importers = [m for m, edges in graph.items() if "lmcache_resp.bench.cli" in edges]
    assert sorted(importers) == ["lmcache_resp.bench", "lmcache_resp.bench.__main__"]


def test_nothing_shipped_imports_the_test_support_package() -> None:
    """The wheel holds no test fixture, so nothing in it may need one."""
    for name, path in {**module_names(PACKAGE), **module_names(LAUNCHER)}.items():
        for module, _ in imported_names(path):
            assert module.split(".")[0] != TEST_SUPPORT, f"{name} imports {module}"
