"""biotf's modules import each other without cycles, function-level imports included (a cycle hidden inside a
function still ties two modules into one). `if TYPE_CHECKING:` imports are annotations only and do not count."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "biotf"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(node: ast.AST, modules: set[str]) -> set[str]:
    """The biotf modules a module's import statements name (`from a import b` names a.b when b is a module)."""
    if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
        return set()
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names if alias.name in modules}
    if isinstance(node, ast.ImportFrom):
        if node.module not in modules:
            return set()
        return {node.module} | ({f"{node.module}.{alias.name}" for alias in node.names} & modules)
    return set().union(*(imported_modules(child, modules) for child in ast.iter_child_nodes(node)))


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(path): path for path in PACKAGE.rglob("*.py")}
    return {name: imported_modules(ast.parse(path.read_text(encoding="utf-8")), set(paths)) - {name}
            for name, path in paths.items()}


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_the_checker_sees_a_function_level_cycle():
    graph = import_graph()
    graph["biotf.tokenizers.loading"].add("biotf.tokenizers.bpe")  # the cycle this package had until issue 17
    assert {"biotf.tokenizers.bpe", "biotf.tokenizers.loading"} in cycles(graph)
