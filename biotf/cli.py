"""The `biotf` command: argument parsing only; each subcommand calls into the packages.

Subcommands live in `biotf/commands/<name>.py`, each defining `add_parser(subparsers)` which
registers its parser with `set_defaults(run=<function taking the parsed args>)`.
Every `--device` is checked here (`biotf.devices`), and what a command says on stderr cannot fail it
(`biotf.progress.messages_to_stderr`).
A `BiotfError` is printed as one line on stderr with exit status 2, never a traceback; so is a write the system
refused (a full disk, a read-only file system, no permission: `biotf.errors.disk_error`). A `BiotfWarning` is one
line too, `biotf <command>: warning: ...`, and the work goes on.
The library names its parameters by their Python names; a command runs inside `biotf.naming.flags` of its parser
(`command_flags`), so what it prints names them by the flags the user typed.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import sys
import warnings
from typing import Any, TypeVar

from biotf.added_commands import added_commands, command_module
from biotf.devices import check_device
from biotf.errors import BiotfError, BiotfWarning, user_error
from biotf.naming import flags
from biotf.progress import messages_to_stderr

Request = TypeVar("Request")

# Order is the order of `biotf --help`. A name here is a module of biotf/commands, or a command another package adds
# (`biotf.added_commands`: `tokens`, `experiment` and `compare` are the recipes', biotf_recipes); a command added and
# not named here follows these, by name, and one named here that no installed package adds is left out.
COMMANDS = ["tokenize", "train", "export_model", "embed", "score", "predict", "contacts", "tokens", "probe", "plot",
            "search", "generate", "experiment", "compare"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="biotf", description="Tokenize, train, export and run sequence transformers.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    added = added_commands()
    for name in [*COMMANDS, *sorted(set(added) - set(COMMANDS))]:
        if name in added:
            module = command_module(added[name])
        else:
            found = importlib.util.find_spec(f"biotf.commands.{name}") is not None
            module = importlib.import_module(f"biotf.commands.{name}") if found else None
        if module is not None:
            module.add_parser(subparsers)
    return parser


def command_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """Each option's flag by its field (`top_k` -> `--top-k`) in the parsers `args` went through, from `biotf` down
    to the subcommand chosen (a deeper parser's flag wins), and the flags of library parameters named otherwise than
    their argument (a command's `set_defaults(parameter_flags={"input_path": "--input"})`): how a parameter the
    library names reads to the user."""
    by_field: dict[str, str] = {}
    while parser is not None:
        chosen = None
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(args, action.dest, None))
            elif action.option_strings and action.dest != argparse.SUPPRESS:
                by_field[action.dest] = next((flag for flag in action.option_strings if flag.startswith("--")),
                                             action.option_strings[0])
            elif not action.option_strings:
                by_field[action.dest] = action.dest  # a positional argument: its name
        parser = chosen
    return by_field | getattr(args, "parameter_flags", {})


def request_of(request: type[Request], args: argparse.Namespace, **given: Any) -> Request:
    """The library's `request` dataclass of parsed arguments: each field from the argument of its name, `given` over
    them (a field the flags word otherwise, such as `progress=not args.no_progress`)."""
    return request(**{field.name: getattr(args, field.name) for field in dataclasses.fields(request)
                      if field.name not in given}, **given)


def _one_line_warnings(command: str, show_other):
    """`warnings.showwarning` printing biotf's own warnings as `biotf <command>: warning: ...`, others as before."""

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, BiotfWarning):
            print(f"biotf {command}: warning: {message}", file=sys.stderr)
        else:
            show_other(message, category, filename, lineno, file, line)

    return show


def command_name(args: argparse.Namespace) -> str:
    """The command as typed, with its form where it has one (`generate evaluate`, `search build`): the name its one
    line of error or warning starts with."""
    form = getattr(args, "form", None) or getattr(args, "action", None)
    return f"{args.command} {form}" if isinstance(form, str) else args.command


def main(argv: list[str] | None = None) -> int:
    with messages_to_stderr():  # what a command says on stderr never fails it, nor goes to stdout
        return _run(argv)


def _run(argv: list[str] | None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        # argparse's REMAINDER does not start at a leading flag (`biotf train -m ...`, `--help`, `--cfg job`):
        # a command that forwards its arguments (`forwards_flags`) gets them back in front, in order.
        if not getattr(args, "forwards_flags", False):
            parser.error(f"unrecognized arguments: {' '.join(unknown)}")
        args.overrides = [*unknown, *args.overrides]
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _one_line_warnings(command_name(args), warnings.showwarning)
            if getattr(args, "device", None) is not None:  # every command's --device, before any model is read
                check_device("--device", args.device)
            with flags(command_flags(parser, args)):
                result = args.run(args)
    except (BiotfError, OSError) as caught:
        error = user_error(caught)
        if error is None:
            raise
        print(f"biotf {command_name(args)}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"biotf {command_name(args)}: interrupted", file=sys.stderr)
        return 130
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
