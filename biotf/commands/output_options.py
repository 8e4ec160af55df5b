"""The output-file rule shared by every command that writes a file the user names (`embed`, `plot`, `compare`,
`predict`, `score`, `contacts`, `generate`).

See `biotf.export.outputs` for the rule itself; this module adds `--overwrite` to a parser and applies the
rule to a command's outputs before any work starts, saying on stderr which leftovers of killed runs it removed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from biotf.export.outputs import check_distinct, check_output, remove_leftovers


def add_overwrite_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--overwrite", action="store_true",
                        help="replace existing output files (never an input, never a non-PNG file with a map)")


def prepare_outputs(args: argparse.Namespace, outputs: dict[str, Path | None], inputs: list[Path],
                    images: tuple[str, ...] = ()) -> None:
    """Check every named output (flag -> path; None = not asked for) against the rule, then remove the
    leftovers of killed runs over the same names. `images` are the flags whose file is a PNG map."""
    named = {flag: Path(path) for flag, path in outputs.items() if path is not None}
    check_distinct(named)
    for flag, path in named.items():
        check_output(path, inputs, args.overwrite, image=flag in images, flag=flag)
    for flag, path in named.items():
        removed = remove_leftovers(path)
        if removed:
            print(f"biotf {args.command}: removed {len(removed)} leftover work file(s) of an interrupted run over "
                  f"{path}: {', '.join(entry.name for entry in removed)}", file=sys.stderr)
