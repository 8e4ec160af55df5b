"""biotf's modules import each other without cycles, function-level and `if TYPE_CHECKING:` imports included (a
cycle hidden inside a function or behind an annotation still ties two modules into one: neither can be read,
tested or moved without the other).

The graph is file-level: an import points at the file that defines the imported name, seen through a package's
`__init__` re-exports and lazy exports (`biotf/lazy.py`), so `from biotf.model import TransformerConfig` is an
edge to `biotf.model.config`, not to `biotf.model`'s `__init__` (which would hide the cycles between the files).
On top of that graph, the top-level parts of biotf (`biotf.model`, `biotf.training`, ...) import each other without
cycles either."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "biotf"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def import_nodes(node: ast.AST, module: str, package: bool,
                 annotations: bool = True) -> list[tuple[str, list[tuple[str, str]]]]:
    """(imported module, [(name, bound as)]) for every import statement under `node`, absolute names; a plain
    `import a.b` lists no names. `annotations`: `if TYPE_CHECKING:` imports included."""
    if not annotations and is_type_checking(node):
        return []
    if isinstance(node, ast.Import):
        return [(alias.name, []) for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = module.split(".")
        if node.level:
            base = base[:len(base) - node.level + (1 if package else 0)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        return [(source, [(alias.name, alias.asname or alias.name) for alias in node.names])]
    if (isinstance(node, ast.Call) and ast.unparse(node.func) in ("importlib.import_module", "import_module")
            and node.args and isinstance(node.args[0], ast.Constant)):
        return [(node.args[0].value, [])]
    return [entry for child in ast.iter_child_nodes(node)
            for entry in import_nodes(child, module, package, annotations)]


@cache
def sources() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


@cache
def parsed(module: str) -> ast.Module:
    return ast.parse(sources()[module].read_text(encoding="utf-8"))


def is_package(module: str) -> bool:
    return sources()[module].name == "__init__.py"


@cache
def reexports(module: str) -> dict[str, tuple[str, str]]:
    """name -> (module, name there) for each name `module` takes from another biotf module rather than defining it:
    its top-level `from x import y`, the imports inside its module `__getattr__` and its `lazy_exports` table."""
    found: dict[str, tuple[str, str]] = {}
    tree = parsed(module)
    statements = [node for node in tree.body if not isinstance(node, ast.FunctionDef)]
    getattrs = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "__getattr__"]
    for statement in statements + getattrs:
        for source, names in import_nodes(statement, module, is_package(module)):
            if source in sources():
                found.update({bound: (source, name) for name, bound in names})
    for node in tree.body:
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(target, ast.Name) and target.id == "_EXPORTS" for target in node.targets)):
            exports = ast.literal_eval(node.value)
            found.update({name: (f"{module}.{submodule}", name) for name, submodule in exports.items()})
    return found


def defining_file(module: str, name: str) -> str:
    """The module whose file defines `name` as `module` offers it (itself when the name is its own)."""
    seen = set()
    while (module, name) not in seen:
        seen.add((module, name))
        if f"{module}.{name}" in sources():
            return f"{module}.{name}"
        if name not in reexports(module):
            return module
        module, name = reexports(module)[name]
    return module


def imported_files(module: str, annotations: bool = True) -> set[str]:
    """The biotf files `module`'s import statements (function-level ones included) need."""
    found = set()
    for source, names in import_nodes(parsed(module), module, is_package(module), annotations):
        if source not in sources():
            continue
        if not names:
            found.add(source)
        for name, _ in names:
            found.add(defining_file(source, name) if name != "*" else source)
    return found - {module}


def import_graph(annotations: bool = True) -> dict[str, set[str]]:
    """module -> the biotf modules whose files it needs (`annotations`: through `if TYPE_CHECKING:` imports too)."""
    return {module: imported_files(module, annotations) for module in sources()}


# The links a file cycle may still run through: annotations alone (`if TYPE_CHECKING:`), each with why the code
# cannot point the other way. TransformerConfig checks its `pos`, `norm` and `mlp` against the registries of those
# modules and lets the chosen class check the rest (`check_config`), at construction; the classes are built from
# the config they are handed and name its type only in their signatures. The heads module holds the heads the trunk owns and
# the task heads that own a trunk, beside each other as HF's modeling_esm.py keeps them.
ANNOTATION_ONLY = {
    ("biotf.model.mlp", "biotf.model.config"): "config.py checks `mlp` and `lm_head_activation` against MLP_CLASSES",
    ("biotf.model.norms", "biotf.model.config"): "config.py checks `norm` against NORM_CLASSES",
    ("biotf.model.positions", "biotf.model.config"): "config.py checks `pos` and the class's own rules",
    ("biotf.model.heads", "biotf.model.transformer"): "the trunk holds the LM and contact heads of heads.py; a task "
                                                      "head holds a trunk, whose type it names in signatures only",
}


def without_annotation_links(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    return {module: targets - {b for a, b in ANNOTATION_ONLY if a == module} for module, targets in graph.items()}


def part(module: str) -> str:
    """The top-level part of biotf a module is in: `biotf.model.hf.llama` -> `biotf.model`."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """top-level part -> the parts its modules import."""
    parts: dict[str, set[str]] = {part(module): set() for module in graph}
    for module, targets in graph.items():
        parts[part(module)] |= {part(target) for target in targets} - {part(module)}
    return parts


def cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
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

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def cycle_path(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """One closed path through a cycle's modules, for the failure message: a -> b -> a."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:  # breadth first, inside the component, back to start
        node = frontier.pop(0)
        for target in sorted(graph[node] & component):
            if target == start:
                return paths[node] + [start]
            if target not in paths:
                paths[target] = paths[node] + [target]
                frontier.append(target)
    raise AssertionError(f"{sorted(component)} is no cycle")


def described(graph: dict[str, set[str]]) -> list[str]:
    """Each cycle as one line: its modules, then one path through them."""
    return [f"{', '.join(sorted(component))}: {' -> '.join(cycle_path(graph, component))}"
            for component in cycles(graph)]


def test_no_file_level_import_cycles():
    graph = without_annotation_links(import_graph())
    assert described(graph) == [], "import cycles between files:\n" + "\n".join(described(graph))


def test_the_annotation_links_are_annotations_and_still_needed():
    """Each link of ANNOTATION_ONLY is an `if TYPE_CHECKING:` import only (nothing at run time needs it), and each
    still closes a cycle (one that no longer does is dropped from the list)."""
    graph, runtime = import_graph(), import_graph(annotations=False)
    for source, target in ANNOTATION_ONLY:
        assert target in graph[source] and target not in runtime[source], (source, target)
        assert any({source, target} <= cycle for cycle in cycles(graph)), (source, target)


def test_no_package_level_import_cycles():
    graph = package_graph(import_graph())
    assert described(graph) == [], "import cycles between biotf's parts:\n" + "\n".join(described(graph))


def test_the_checker_sees_a_function_level_cycle():
    graph = import_graph()
    graph["biotf.tokenizers.bpe"].add("biotf.tokenizers.build")  # the cycle this package had until issue 35
    assert any({"biotf.tokenizers.bpe", "biotf.tokenizers.build"} <= cycle for cycle in cycles(graph))


def test_an_import_through_a_package_points_at_the_defining_file():
    graph = import_graph()
    assert defining_file("biotf.model", "TransformerConfig") == "biotf.model.config"  # an __init__ re-export
    assert defining_file("biotf.io", "read_records") == "biotf.io.readers"  # a lazy export
    assert defining_file("biotf", "load_pretrained") == "biotf.checkpoint.loading"  # the package __getattr__
    assert defining_file("biotf.model", "hf") == "biotf.model.hf"  # a subpackage
    assert "biotf.model" not in graph["biotf.training.module"]


def test_the_checker_sees_a_package_level_cycle():
    graph = import_graph()
    graph["biotf.model.kv_cache"].add("biotf.training.hints")  # no file cycle, but model <-> training
    assert cycles(without_annotation_links(graph)) == []
    assert any({"biotf.model", "biotf.training"} <= cycle for cycle in cycles(package_graph(graph)))
    assert described(package_graph(graph))
