"""The output-file rule shared by every command that writes a file the user names (`embed`, `plot`, `compare`,
`predict`, `score`, `contacts`, `generate`, `search query`, `tokens`).

See `biotf.io.outputs` for the rule itself; this module adds `--overwrite` to a parser and holds a command's
outputs for the whole command (`claim_outputs`), saying on stderr which leftovers of killed runs it removed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from biotf.io.outputs import check_distinct, check_output, claim_output, remove_leftovers


def add_overwrite_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--overwrite", action="store_true",
                        help="replace existing output files (never an input, never a non-PNG file with a map)")


@contextmanager
def claim_outputs(args: argparse.Namespace, outputs: dict[str, Path | None], inputs: list[Path],
                  images: tuple[str, ...] = ()) -> Iterator[None]:
    """Check every named output (flag -> path; None = not asked for) against the rule, hold them all while the
    block runs (`claim_output`: a second run over one of them is refused), then remove the leftovers of killed runs
    over the same names. `images` are the flags whose file is a PNG map.

    Under torchrun only rank 0 holds them (it alone writes the outputs); the other ranks check the rule."""
    from biotf.commands.parts import launch

    named = {flag: Path(path) for flag, path in outputs.items() if path is not None}
    check_distinct(named)
    for flag, path in named.items():  # every output checked before the first is held
        check_output(path, inputs, args.overwrite, image=flag in images, flag=flag)
    launched = launch()
    if launched is not None and launched.rank != 0:
        yield
        return
    with ExitStack() as held:
        removed = {flag: held.enter_context(claim_output(path, inputs, args.overwrite, image=flag in images,
                                                         flag=flag)) for flag, path in named.items()}
        for flag, path in named.items():
            removed[flag] += remove_leftovers(path)
            if removed[flag]:
                print(f"biotf {args.command}: removed {len(removed[flag])} leftover work file(s) of an interrupted "
                      f"run over {path}: {', '.join(entry.name for entry in removed[flag])}", file=sys.stderr)
        yield
