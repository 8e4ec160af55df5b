"""The output-file rule shared by every command that writes a file the user names (`embed`, `plot`, `compare`,
`predict`, `score`, `contacts`, `generate`, `search query`, `tokens`).

See `biotf.export.outputs` for the rule itself; this module adds `--overwrite` to a parser and holds a command's
outputs for the whole command (`claim_outputs`), saying on stderr which leftovers of killed runs it removed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from biotf.export.outputs import claim_outputs as claim_all


def add_overwrite_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--overwrite", action="store_true",
                        help="replace existing output files (never an input, never a non-PNG file with a map)")


@contextmanager
def claim_outputs(args: argparse.Namespace, outputs: dict[str, Path | None], inputs: list[Path],
                  images: tuple[str, ...] = ()) -> Iterator[None]:
    """Hold the command's outputs (flag -> path; None = not asked for) for the block by the rule, `--overwrite`
    as given (`biotf.export.outputs.claim_outputs`); the leftovers of killed runs it removes are said on stderr.
    `images` are the flags whose file is a PNG map."""
    with claim_all(outputs, inputs, args.overwrite, images,
                   say=lambda line: print(f"biotf {args.command}: {line}", file=sys.stderr)):
        yield
