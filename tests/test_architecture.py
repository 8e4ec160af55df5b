"""The map of parts in docs/architecture.md holds: every biotf module belongs to a part, and every import (function-level
ones included) is an arrow the map allows."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from test_import_graph import import_graph, import_nodes

MAP = Path(__file__).resolve().parents[1] / "docs" / "architecture.md"


def table(heading: str) -> list[list[str]]:
    """The rows of the markdown table under `## heading` in the map, as lists of cell texts."""
    section = MAP.read_text(encoding="utf-8").split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip().strip("|").split("|") for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row] for row in rows[2:]]  # past the header and its --- line


def names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell) or [name.strip() for name in cell.split(",") if name.strip()]


PARTS = {row[0]: names(row[1]) for row in table("Parts")}
MAY_IMPORT = {row[0]: set(names(row[2])) | {row[0]} for row in table("Parts")}
EXCEPTIONS = {(names(row[0])[0], names(row[1])[0]) for row in table("Allowed exceptions")}
GRAPH = import_graph()


def part_of(module: str) -> str | None:
    """The part whose module prefix is the longest one of `module`."""
    best, length = None, -1
    for part, prefixes in PARTS.items():
        for prefix in prefixes:
            within = module == prefix or (module.startswith(prefix + ".") and prefix != "biotf")  # biotf: __init__
            if within and len(prefix) > length:
                best, length = part, len(prefix)
    return best


def violations(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for source, targets in sorted(graph.items()):
        for target in sorted(targets):
            allowed = part_of(target) in MAY_IMPORT[part_of(source)] or any(
                (source == a or source.startswith(a + ".")) and (target == b or target.startswith(b + "."))
                for a, b in EXCEPTIONS)
            if not allowed:
                found.append(f"{source} ({part_of(source)}) -> {target} ({part_of(target)})")
    return found


def test_the_map_names_known_parts_only():
    assert set().union(*MAY_IMPORT.values()) <= set(PARTS)
    assert "Face" not in set().union(*(allowed - {part} for part, allowed in MAY_IMPORT.items()))


def test_every_module_belongs_to_a_part():
    assert [module for module in GRAPH if part_of(module) is None] == []


def test_imports_follow_the_map():
    assert violations(GRAPH) == []


@pytest.mark.parametrize("source, target", [
    ("biotf.training.run", "biotf.inference.generation"),  # training never imports inference
    ("biotf.training.module", "biotf.analysis.probe"),  # nor analysis
    ("biotf.model.transformer", "biotf.tokenizers.base"),  # the model knows nothing of tokenizers
    ("biotf.checkpoint.loading", "biotf.finetune.finetune_run"),  # lower parts never import higher ones
    ("biotf.export.embed", "biotf.commands.embed"),  # nothing imports the Face
])
def test_a_wrong_import_is_caught(source, target):
    graph = {module: set(targets) for module, targets in GRAPH.items()}
    graph[source].add(target)
    assert violations(graph) == [f"{source} ({part_of(source)}) -> {target} ({part_of(target)})"]


RECIPES = "biotf_recipes"
REPO = MAP.parents[1]


def recipe_references(source: str, module: str) -> list[str]:
    """Each place in `source` (module `module`) that reaches the recipes: an import of them (function-level and
    `importlib.import_module("...")` ones included) or a string naming them outside a docstring (an import by name
    waiting to happen: `import_module(f"{...}")`, an entry point written in code)."""
    tree = ast.parse(source)
    imports = [target for target, _ in import_nodes(tree, module, False) if target.split(".")[0] == RECIPES]
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}
    names = [node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)
             and id(node) not in docstrings and RECIPES in node.value]
    return [f"imports {target}" for target in imports] + [f"names {name!r}" for name in names]


def test_recipes_import_the_library_and_the_library_never_imports_recipes():
    """The applications (`biotf_recipes`: experiments, the MOSES benchmark, the token analysis) use the library as a
    user's code does; nothing under biotf/ imports or names them: `biotf` finds their commands through the
    entry-point group `biotf.commands` (`biotf.added_commands`)."""
    library = {path.relative_to(REPO).as_posix(): found for path in sorted((REPO / "biotf").rglob("*.py"))
               if (found := recipe_references(path.read_text(encoding="utf-8"), "biotf.module"))}
    assert library == {}
    recipes = sorted((REPO / RECIPES).rglob("*.py"))
    assert any(target.split(".")[0] == "biotf" for path in recipes
               for target, _ in import_nodes(ast.parse(path.read_text(encoding="utf-8")), "m", False))


@pytest.mark.parametrize("source", [
    "def f():\n    from biotf_recipes.moses import metrics\n",
    "import biotf_recipes.experiments as experiments\n",
    "importlib.import_module('biotf_recipes.tokens')\n",
    "COMMANDS = {'tokens': 'biotf_recipes.commands.tokens'}\n",
])
def test_a_reach_into_the_recipes_is_caught(source):
    assert recipe_references(source, "biotf.module") != []
    assert recipe_references('"""Docstrings may name biotf_recipes."""\n', "biotf.module") == []
