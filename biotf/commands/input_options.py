"""The input-file options shared by every command that reads sequence records (`tokenize`, `embed`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from biotf.data.readers import FORMATS, ReaderOptions


def add_input_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """--input FILE plus the reader options that say how to read it (`required`: False where another option
    can name the file instead, as `biotf score --variants`)."""
    parser.add_argument("--input", required=required, type=Path, metavar="FILE", help="FASTA, GenBank, CSV/TSV, .smi or text")
    parser.add_argument("--format", choices=FORMATS, help="input format (default: from the extension)")
    parser.add_argument("--column", help="CSV/TSV sequence column (default: sequence, seq, smiles, text or document)")
    parser.add_argument("--id-column", help="CSV/TSV column holding record ids (default: the row number)")
    parser.add_argument("--no-header", action="store_true", help="CSV/TSV without a header row; columns are 0, 1, ...")


def reader_options(args: argparse.Namespace) -> ReaderOptions:
    """The `ReaderOptions` the parsed input arguments describe."""
    return ReaderOptions(format=args.format, column=args.column, id_column=args.id_column, header=not args.no_header)
