"""The benchmark's modules import one another without a cycle: shared options and failures live
in modules of their own (options.py, errors.py), below everything that uses them."""

from __future__ import annotations

import ast
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "lmcache_resp" / "bench"
PACKAGE = "lmcache_resp.bench"


def bench_imports() -> dict[str, set[str]]:
    """Module -> the bench modules it imports, at module level or inside functions alike."""
    modules = {path.stem for path in BENCH.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for name in modules:
        edges: set[str] = set()
        for node in ast.walk(ast.parse((BENCH / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
                if node.module == PACKAGE:  # from lmcache_resp.bench import pattern
                    edges |= {alias.name for alias in node.names if alias.name in modules}
                elif node.module.startswith(PACKAGE + "."):
                    edges.add(node.module.split(".")[2])
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0, f"{name}.py: a relative import; this check reads absolute ones"
            elif isinstance(node, ast.Import):
                edges |= {alias.name.split(".")[2] for alias in node.names if alias.name.startswith(PACKAGE + ".")}
        graph[name] = edges & modules
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


def test_bench_imports_form_a_dag() -> None:
    graph = bench_imports()
    assert {"cli", "options", "errors", "run"} <= set(graph)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])
    # Nothing imports the command line: it is the top, above the run it starts.
    assert not [module for module, edges in graph.items() if "cli" in edges and module not in ("__init__", "__main__")]
