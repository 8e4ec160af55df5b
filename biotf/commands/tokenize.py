"""`biotf tokenize`: show how a tokenizer cuts the records of a file, and what its policies changed.

    biotf tokenize --tokenizer protein --input proteins.fasta
    biotf tokenize --tokenizer dna --option k=6 --option stride=1 --input genome.gb --ids
    biotf tokenize --tokenizer smiles --input molecules.csv --column smiles --limit 5
    biotf tokenize --tokenizer runs/x/tokenizer.json --input corpus.txt

Prints one line per record on stdout (`id<TAB>tokens`, or ids with `--ids`), then a summary on
stderr: records, tokens, and every count of what a reader or tokenizer policy changed.
Records stream through in chunks (`biotf.data.tokenize`), so any file size works.
"""

from __future__ import annotations

import argparse
import os
import sys

from biotf.commands.input_options import add_input_arguments, add_tokenizer_options, as_option_errors, reader_options
from biotf.data.tokenize import tokenize_file
from biotf.errors import ConfigError
from biotf.tokenizers.build import parse_options
from biotf.tokenizers.presets import resolve_tokenizer


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tokenize", help="print the tokens of each record of a file and a policy summary",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", required=True, metavar="NAME|PATH",
                        help="a preset of conf/tokenizer (protein, dna, dna_char, smiles, ...), a registered "
                             "scheme, or a saved tokenizer (directory or tokenizer.json)")
    add_tokenizer_options(parser, "a constructor option of a named scheme or preset, e.g. k=6, unknown=to_unk "
                                  "(repeatable); on a saved tokenizer, a policy that keeps its vocabulary")
    add_input_arguments(parser)
    parser.add_argument("--ids", action="store_true", help="print token ids instead of token strings")
    parser.add_argument("--no-special-tokens", action="store_true", help="leave out <cls>, <eos> and the like")
    parser.add_argument("--limit", type=int, metavar="N",
                        help="print only the first N records (the summary still covers the whole file)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.limit is not None and args.limit < 0:
        raise ConfigError("--limit", args.limit, allowed="an integer >= 0")
    tokenizer_options = parse_options(args.tokenizer_options)
    with as_option_errors(tokenizer_options):
        tokenizer = resolve_tokenizer(args.tokenizer, tokenizer_options)
    options = reader_options(args)
    try:
        n_records, n_tokens, stats = tokenize_file(tokenizer, args.input, options, sys.stdout, args.ids,
                                                   not args.no_special_tokens, args.limit)
    except BrokenPipeError:  # piped into `head`: the reader stopped listening, which is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so Python's exit flush stays quiet
        return 0
    print(f"{args.input}: {n_records} records, {n_tokens} tokens ({n_tokens / n_records:.1f} per record) "
          f"with {tokenizer.kind} tokenizer {tokenizer.fingerprint}; policies: {stats.summary()}", file=sys.stderr)
    return 0
