"""No module of lmcache_resp imports itself back through others: the package's import graph is a
DAG (shared pieces live in modules of their own, below everything that uses them: the bench's
options.py and errors.py, the package's errors.py and settings.py). Imports inside functions and
``if TYPE_CHECKING:`` blocks count too: a circle there is a circle a reader must untangle.

Importing a submodule runs its parent packages' ``__init__`` first; that is Python's doing, not
an edge (``from lmcache_resp import RespSettings`` is one: it needs the package's __init__).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "lmcache_resp"
PACKAGE = "lmcache_resp"
TEST_SUPPORT = "lmcache_resp_testing"


def module_names() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name: its __init__),
    the native module by its stub."""
    modules: dict[str, Path] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")) + sorted(PACKAGE_DIR.glob("_native.pyi")):
        parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
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


def package_imports() -> dict[str, set[str]]:
    """Module -> the package's modules it imports. ``from lmcache_resp.bench import pattern``
    imports the module ``lmcache_resp.bench.pattern``; ``from lmcache_resp import RespSettings``
    imports ``lmcache_resp`` itself."""
    modules = module_names()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        for module, names in imported_names(path):
            if module != PACKAGE and not module.startswith(PACKAGE + "."):
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
            "lmcache_resp.bench.servers.cluster"} <= set(graph)
    # ``from lmcache_resp import _native, metrics``: two modules; ``... import RespSettings``: the package.
    assert {"lmcache_resp._native", "lmcache_resp.metrics"} <= graph["lmcache_resp.client"]
    assert "lmcache_resp" in graph["lmcache_resp.bench.cli"]
    assert "lmcache_resp.lmcache.mp" in graph["lmcache_resp.lmcache.non_mp"]


def test_the_package_imports_form_a_dag() -> None:
    graph = package_imports()
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


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
    for name, path in module_names().items():
        for module, _ in imported_names(path):
            assert module.split(".")[0] != TEST_SUPPORT, f"{name} imports {module}"
