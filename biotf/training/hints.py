"""Command lines biotf prints for the user to paste (the resume command after SIGTERM, what to run next): quoted so
that a path with spaces, quotes, `=` or non-ASCII characters arrives unchanged.

Two parsers read such a line: the shell (`shlex.quote` answers it) and, for the value of a Hydra override, Hydra's
own override grammar, which refuses `é`, `=`, `[`, `'` and more in an unquoted value, splits one at `,` into a
sweep and resolves `${...}` in it. `hydra_override` writes those values quoted and escaped in Hydra's syntax.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

# An unquoted override value Hydra reads back as this very string: plain ASCII path characters, with a `/`
# so that it cannot be read as a number, a bool or null.
PLAIN_PATH = re.compile(r"[A-Za-z0-9_./+-]*/[A-Za-z0-9_./+-]*")


def hydra_value(value: str | Path) -> str:
    """`value` as Hydra's override parser reads it back unchanged: as it is when that is safe, else single-quoted
    with its quotes, the backslashes before a quote or at the end, and interpolations `${` escaped."""
    text = str(value)
    if PLAIN_PATH.fullmatch(text):
        return text
    # Backslashes are literal in a quoted value except in a run that ends at a quote, the closing quote or `${`:
    # such a run is doubled, then the quote or interpolation escaped.
    body = re.sub(r"(\\*)('|\$\{|$)", lambda m: m.group(1) * 2 + ("\\" + m.group(2) if m.group(2) else ""), text)
    return f"'{body}'"


def hydra_override(key: str, value: str | Path) -> str:
    """`key=value` for Hydra's command line (`hydra_value`); pass it through `command_line` for the shell."""
    return f"{key}={hydra_value(value)}"


def command_line(*words: str | Path) -> str:
    """The words as one shell command line, each quoted where the shell would otherwise change it."""
    return shlex.join(str(word) for word in words)


def data_command(verb: str, run_dir: Path, data_path: str | Path, column: str | None, id_column: str | None,
                 output: Path) -> str:
    """`biotf <verb> --model RUN --input DATA [--column C] [--id-column I] --output OUT`: a biotf command that reads
    the run's data file as training read it (the one module whose text is whole command lines, so it spells flags)."""
    reader = [word for flag, value in (("--column", column), ("--id-column", id_column)) if value
              for word in (flag, value)]
    return command_line("biotf", verb, "--model", run_dir, "--input", data_path, *reader, "--output", output)
