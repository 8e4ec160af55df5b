"""`biotf.added_commands`: `biotf` finds the commands other packages add (the recipes' among them) through the
entry-point group `biotf.commands`, and from a checkout as its pyproject.toml declares them."""

from __future__ import annotations

import importlib
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

import biotf.added_commands as added
from biotf.cli import COMMANDS, build_parser, main

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def commands_of(parser) -> list[str]:
    (subparsers,) = [action for action in parser._actions if hasattr(action, "choices") and action.choices]
    return list(subparsers.choices)


def installed(*entries: tuple[str, str, str]):
    """An `entry_points(group=...)` that finds `entries` (name, module, distribution) in installed metadata."""
    found = [SimpleNamespace(name=name, value=module, group=added.GROUP, dist=SimpleNamespace(name=distribution),
                             load=lambda module=module: importlib.import_module(module))
             for name, module, distribution in entries]
    return lambda group: found if group == added.GROUP else []


def test_the_checkout_declares_the_recipes_commands():
    declared = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["entry-points"][added.GROUP]
    assert declared == {"tokens": "biotf_recipes.commands.tokens", "experiment": "biotf_recipes.commands.experiment",
                        "compare": "biotf_recipes.commands.compare",
                        "generate evaluate": "biotf_recipes.commands.generate_evaluate"}
    assert {name: entry.value for name, entry in added.added_commands().items()} == {
        name: module for name, module in declared.items() if " " not in name}
    assert {name: entry.value for name, entry in added.added_commands("generate").items()} == {
        "evaluate": "biotf_recipes.commands.generate_evaluate"}
    assert added.added_commands("tokens") == {}


def test_the_help_lists_library_and_recipe_commands_in_the_order_named():
    assert commands_of(build_parser()) == [name.replace("_", "-") for name in COMMANDS]


def test_another_packages_command_runs_and_follows_the_named_ones(tmp_path, monkeypatch, capsys):
    (tmp_path / "hello_command.py").write_text(
        "def add_parser(subparsers):\n"
        "    parser = subparsers.add_parser('hello', help='say hello')\n"
        "    parser.add_argument('--name', default='world')\n"
        "    parser.set_defaults(run=lambda args: print(f'hello {args.name}'))\n", encoding="utf-8")
    (tmp_path / "shout_form.py").write_text(
        "def add_parser(forms, description):\n"
        "    forms.add_parser('shout', description=description).set_defaults(run=lambda args: print('SHOUT'))\n",
        encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(added, "entry_points", installed(
        ("hello", "hello_command", "biotf-hello"), ("generate shout", "shout_form", "biotf-hello"),
        ("tokens", "a_module_an_older_biotf_install_named", "biotf")))  # the checkout's declaration stands for it
    assert commands_of(build_parser())[-3:] == ["experiment", "compare", "hello"]
    assert main(["hello", "--name", "biotf"]) == 0 and capsys.readouterr().out == "hello biotf\n"
    assert main(["generate", "shout"]) == 0 and capsys.readouterr().out == "SHOUT\n"
    assert added.added_commands()["tokens"].value == "biotf_recipes.commands.tokens"
    assert sorted(added.added_commands("generate")) == ["evaluate", "shout"]


def test_an_installed_copy_reads_the_metadata(monkeypatch):
    """Outside a checkout (no pyproject.toml beside the package) the installed metadata is all there is."""
    monkeypatch.setattr(added, "CHECKOUT_PYPROJECT", Path("/nonexistent/pyproject.toml"))
    monkeypatch.setattr(added, "entry_points", installed(("tokens", "biotf_recipes.commands.tokens", "biotf")))
    assert list(added.added_commands()) == ["tokens"]
    names = commands_of(build_parser())
    assert "tokens" in names and "experiment" not in names and "compare" not in names  # named, but not installed
    assert names[:3] == ["tokenize", "train", "export-model"]


@pytest.mark.parametrize("text", ['[project]\nname = "other"\n', '[tool.x]\ny = 1\n'])
def test_a_pyproject_of_another_project_is_no_checkout_of_biotf(tmp_path, text):
    (tmp_path / "pyproject.toml").write_text(text, encoding="utf-8")
    assert added.checkout_entry_points(tmp_path / "pyproject.toml") is None
    assert added.checkout_entry_points(tmp_path / "missing.toml") is None


def test_a_command_that_does_not_import_is_one_line_and_the_others_work(monkeypatch, capsys):
    """An editable install made before a package of commands existed, or a package removed: the rest of `biotf` runs."""
    monkeypatch.setattr(added, "entry_points", installed(("hello", "no_such_module_anywhere", "biotf-hello"),
                                                         ("generate shout", "no_such_form_anywhere", "biotf-hello")))
    names = commands_of(build_parser())
    assert "hello" not in names and names[-2:] == ["experiment", "compare"]
    assert capsys.readouterr().err == (  # generate's form first: `generate` comes before `hello`
        "biotf: warning: command 'generate shout' (no_such_form_anywhere) is not available: No module named "
        "'no_such_form_anywhere'\nbiotf: warning: command 'hello' (no_such_module_anywhere) is not available: No "
        "module named 'no_such_module_anywhere'\n")
