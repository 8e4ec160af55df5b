"""The input options shared by every command that reads sequence records (`tokenize`, `embed`, `score`,
`predict`): the file, how to read it, and `--option KEY=VALUE` for the tokenizer's policies (`generate` too)."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from biotf.io.readers import INPUT_FORMATS, ReaderOptions
from biotf.tokenizers.build import option_errors, parse_options


def add_input_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """--input FILE plus the reader options that say how to read it (`required`: False where another option
    can name the file instead, as `biotf score --variants`)."""
    parser.add_argument("--input", required=required, type=Path, metavar="FILE", help="FASTA, GenBank, CSV/TSV, .smi or text")
    parser.add_argument("--format", choices=INPUT_FORMATS, help="input format (default: from the extension)")
    parser.add_argument("--column", help="CSV/TSV sequence column (default: sequence, seq, smiles, text or document)")
    parser.add_argument("--id-column", help="CSV/TSV column holding record ids (default: a column named id, any "
                                             "case, else the row number 0, 1, ...)")
    parser.add_argument("--no-header", action="store_true", help="CSV/TSV without a header row; columns are 0, 1, ...")


def reader_options(args: argparse.Namespace) -> ReaderOptions:
    """The `ReaderOptions` the parsed input arguments describe."""
    return ReaderOptions(format=args.format, column=args.column, id_column=args.id_column, header=not args.no_header)


def add_tokenizer_options(parser: argparse.ArgumentParser, help: str) -> None:
    """--option KEY=VALUE (repeatable), read by `biotf.tokenizers.build.parse_options`."""
    parser.add_argument("--option", dest="tokenizer_options", action="append", default=[], metavar="KEY=VALUE",
                        help=help)


def add_precision_argument(parser: argparse.ArgumentParser) -> None:
    """--precision fp32|bf16|int8|auto, read by `load_model` (biotf.model.precision says what each does)."""
    from biotf.conventions import PRECISIONS

    parser.add_argument("--precision", choices=PRECISIONS, default="fp32",
                        help="inference precision (default fp32): bf16 or int8 weights, each checked against fp32 on "
                             "a calibration batch at load and refused if it drifts; auto: the first that passes of "
                             "bf16 where the CPU has it natively (AMX, AVX512-BF16), int8 where it has VNNI, fp32")


def load_model(args: argparse.Namespace, device: str = "cpu", **load: Any):
    """`--model`, loaded through `biotf.Model.load` on `device` with the policies `--option` sets where the command
    has it (a tokenizer's refusal of one names it as such), in the `--precision` it has; `load`: Model.load's other
    options (dtype, for_generation). A load that takes longer than the progress interval says so on stderr
    (`biotf.progress.waiting`) unless `--no-progress`."""
    from biotf.api import Model
    from biotf.progress import waiting

    options = parse_options(getattr(args, "tokenizer_options", None) or [])
    with as_option_errors(options), waiting(not getattr(args, "no_progress", False), f"loading {args.model}"):
        if hasattr(args, "precision"):
            load["precision"] = args.precision
        return Model.load(args.model, device=device, tokenizer_options=options, **load)


def as_option_errors(options: Mapping[str, Any]) -> contextlib.AbstractContextManager[None]:
    """A tokenizer's ConfigError about one of the user's `--option`s names it as such (`--option stop`)."""
    return option_errors(options, "--option {}")
