"""Commands that other packages add to `biotf`: the entry points of the group `biotf.commands`.

An entry point's name is the command as typed (`tokens`; `generate evaluate` for the form `evaluate` of
`biotf generate`), its value a module with `add_parser(subparsers, *args)`, as a module of `biotf/commands` has.
The applications built on the library (`biotf_recipes`: the experiments, the MOSES benchmark, the token analysis)
add their commands this way, declared in pyproject.toml, so the library never imports them.

An install writes the entry points into its metadata once, when it is made. biotf imported from a source checkout
(a pyproject.toml of project `biotf` beside the package) takes its own commands from that file instead, so a command
declared since the install (or a checkout run through PYTHONPATH under another checkout's editable install) is found
as the checkout declares it; other packages' commands come from their metadata either way.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import ModuleType
from typing import Any

GROUP = "biotf.commands"
DISTRIBUTION = "biotf"
CHECKOUT_PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def checkout_entry_points(pyproject: Path) -> list[EntryPoint] | None:
    """The group's entry points as a checkout's `pyproject` declares them; None where biotf is not imported
    from a checkout (an installed wheel), or on Python 3.10, which has no TOML reader (the metadata then stands)."""
    if sys.version_info < (3, 11) or not pyproject.is_file():
        return None
    import tomllib

    project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    if project.get("name") != DISTRIBUTION:
        return None
    return [EntryPoint(name, value, GROUP) for name, value in project.get("entry-points", {}).get(GROUP, {}).items()]


def added_commands(command: str = "") -> dict[str, EntryPoint]:
    """word -> entry point of each command added under `command` ("": the top level, `generate`: its forms)."""
    installed = list(entry_points(group=GROUP))
    declared = checkout_entry_points(CHECKOUT_PYPROJECT)
    if declared is not None:  # the checkout's own declaration stands for biotf's installed metadata
        installed = [entry for entry in installed if entry.dist is None or entry.dist.name != DISTRIBUTION] + declared
    prefix = f"{command} " if command else ""
    return {entry.name.removeprefix(prefix): entry for entry in installed
            if entry.name.startswith(prefix) and " " not in entry.name.removeprefix(prefix)}


def command_module(entry: EntryPoint) -> ModuleType | None:
    """The module of an added command; None where it does not import (its package removed, or an editable install
    made before the package existed: installing again maps it), said in one line on stderr, so that one missing
    command leaves `biotf` and its other commands working."""
    try:
        return entry.load()
    except ImportError as error:
        print(f"biotf: warning: command '{entry.name}' ({entry.value}) is not available: {error}", file=sys.stderr)
        return None


def add_added_parsers(subparsers: argparse._SubParsersAction, command: str, *args: Any) -> None:
    """Register the parsers of the forms other packages add to `command`, by name (`args`: what each form's
    `add_parser` takes after `subparsers`, such as the command's description)."""
    for name, entry in sorted(added_commands(command).items()):
        if (module := command_module(entry)) is not None:
            module.add_parser(subparsers, *args)
