"""Every module of `biotf/commands` (and of the recipes' `biotf_recipes/commands`) parses arguments, calls the library
and prints; the work is a library call.

Read from each module's syntax tree (so a rule broken anywhere in a module fails here, wherever it is called from):
- **Size**: at most `MAX_LINES` (120) lines a module, its docstring (the command's `--help` text) included.
- **No file I/O**: no call of the bare names `open`, `read_records`, `atomic_write`, `atomic_write_text` or
  `write_table`, and no call of a method named `writerow`, `writerows`, `to_csv`, `to_parquet` or `write_table`:
  reading and writing files is the library's (it knows the formats and the all-or-nothing rule).
- **No loops over data**: no `while` statement, and every `for` (statement, comprehension or generator expression)
  iterates a display written in the source — a tuple, list, set or dict literal without `*` or `**` unpacking
  (such as the fixed flags of a check), or the `.items()`, `.keys()` or `.values()` of one. Records, rows, samples,
  files and counts are data: a loop over them, and a summary computed from them, belong in the library, which hands
  the command the lines or the text to print.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ROOT / "biotf" / "commands"
RECIPE_COMMANDS = ROOT / "biotf_recipes" / "commands"  # the recipes' commands keep the same rules
MAX_LINES = 120
FILE_FUNCTIONS = {"open", "read_records", "atomic_write", "atomic_write_text", "write_table"}
FILE_METHODS = {"writerow", "writerows", "to_csv", "to_parquet", "write_table"}
DISPLAYS = (ast.Tuple, ast.List, ast.Set, ast.Dict)
DICT_VIEWS = {"items", "keys", "values"}
MODULES = sorted([*COMMANDS.glob("*.py"), *RECIPE_COMMANDS.glob("*.py")])
IDS = [path.relative_to(ROOT).as_posix() for path in MODULES]


def fixed_by_source(iterable: ast.expr) -> bool:
    """Whether a loop over `iterable` runs a number of times the source fixes: a display without unpacking, or a
    dict display's view."""
    if (isinstance(iterable, ast.Call) and isinstance(iterable.func, ast.Attribute)
            and iterable.func.attr in DICT_VIEWS and not iterable.args):
        iterable = iterable.func.value
    if isinstance(iterable, ast.Dict):
        return None not in iterable.keys  # a None key is a `**mapping`
    return isinstance(iterable, DISPLAYS) and not any(isinstance(item, ast.Starred) for item in iterable.elts)


def broken_rules(source: str) -> list[str]:
    """Each place in `source` that breaks a rule of the module docstring, as 'line N: what'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            function = node.func
            if isinstance(function, ast.Name) and function.id in FILE_FUNCTIONS:
                found.append(f"line {node.lineno}: calls {function.id}()")
            elif isinstance(function, ast.Attribute) and function.attr in FILE_METHODS:
                found.append(f"line {node.lineno}: calls .{function.attr}()")
        elif isinstance(node, ast.While):
            found.append(f"line {node.lineno}: a while loop")
        elif isinstance(node, (ast.For, ast.AsyncFor)) and not fixed_by_source(node.iter):
            found.append(f"line {node.lineno}: a for loop over {ast.unparse(node.iter)}")
        elif isinstance(node, ast.comprehension) and not fixed_by_source(node.iter):
            found.append(f"line {node.iter.lineno}: a comprehension over {ast.unparse(node.iter)}")
    return sorted(found, key=lambda place: int(place.split()[1].rstrip(":")))


def test_there_are_command_modules():
    assert len(MODULES) > 10, COMMANDS


@pytest.mark.parametrize("path", MODULES, ids=IDS)
def test_a_command_module_is_short(path: Path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.name}: {lines} lines (at most {MAX_LINES}): move its work into the library"


@pytest.mark.parametrize("path", MODULES, ids=IDS)
def test_a_command_module_neither_loops_over_data_nor_touches_files(path: Path):
    assert broken_rules(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("source", [
    "for flag in ('--a', '--b'):\n    pass",
    "missing = [flag for flag in ['--a', '--b'] if flag]",
    "for flag, value in {'--a': 1, '--b': None}.items():\n    pass",
    "SearchIndex.open(path)",
    "os.open(os.devnull, os.O_WRONLY)",
])
def test_the_rules_let_through_what_a_parser_does(source: str):
    assert broken_rules(source) == []


@pytest.mark.parametrize("source, rule", [
    ("for row in rows:\n    print(row)", "for loop over rows"),
    ("total = sum(len(row) for row in new)", "comprehension over new"),
    ("for flag in (first, *others):\n    pass", "for loop over (first, *others)"),
    ("for key in {**a}.keys():\n    pass", "for loop over {**a}.keys()"),
    ("while True:\n    break", "while loop"),
    ("handle = open(path)", "calls open()"),
    ("records = read_records(path, options)", "calls read_records()"),
    ("atomic_write_text(path, text)", "calls atomic_write_text()"),
    ("write_table(path, rows, columns)", "calls write_table()"),
    ("writer.writerow(row)", "calls .writerow()"),
    ("frame.to_parquet(path)", "calls .to_parquet()"),
])
def test_the_rules_catch_work_in_a_command(source: str, rule: str):
    broken = broken_rules(source)
    assert len(broken) == 1 and rule in broken[0], broken
