"""The output-file rule shared by every command that writes a file the user names (`embed`, `plot`, `compare`,
`predict`, `score`, `contacts`, `generate`, `search query`, `tokens`).

See `biotf.io.outputs` for the rule itself; this module adds `--overwrite` to a parser and holds a command's
outputs for the whole command (`claim_outputs`), saying on stderr which leftovers of killed runs it removed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from biotf.io.outputs import claim_outputs as claim_all


def add_progress_argument(parser: argparse.ArgumentParser) -> None:
    """`--no-progress`: what a long command prints while it works goes to stderr (`biotf.progress`)."""
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar (on a terminal) or progress lines (elsewhere) on stderr")


def add_overwrite_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--overwrite", action="store_true",
                        help="replace existing output files (never an input, never a non-PNG file with a map)")


@contextmanager
def claim_outputs(args: argparse.Namespace, outputs: dict[str, Path | None], inputs: list[Path],
                  images: tuple[str, ...] = ()) -> Iterator[None]:
    """Hold the command's outputs (flag -> path; None = not asked for) for the block by the rule, `--overwrite`
    as given (`biotf.io.outputs.claim_outputs`); the leftovers of killed runs it removes are said on stderr.
    `images` are the flags whose file is a PNG map. Under torchrun only rank 0 holds them (it alone writes the
    outputs); the other ranks check the rule."""
    from biotf.data.sharded import Launch

    launched = Launch.from_environment()
    with claim_all(outputs, inputs, args.overwrite, images, writes=launched is None or launched.rank == 0,
                   say=lambda line: print(f"biotf {args.command}: {line}", file=sys.stderr)):
        yield
