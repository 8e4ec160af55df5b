"""`biotf predict`: a fine-tuned model's predictions for every record of a file, one row per record.

    biotf predict --model outputs/finetune/<run> --input proteins.fasta --output predictions.tsv
    biotf predict --model <run>/model --input splice.csv --id-column instance_name --output splice.csv
    biotf predict --model <run> --input molecules.csv --column smiles --option unknown=to_unk --output p.tsv

Columns: id, prediction (the class name, the value in the label's unit, or one label character per residue),
and for classification one probability column per class (p_<class>). The output is tab-separated unless its
name ends in .csv. Records are encoded as in training (the run's max_length and long_policy), or to --max-length
tokens (past the model's max_seq_len, with a warning, where its positions extend); records cut or dropped by that
policy, and what the reader's and the tokenizer's policies changed, are counted on stderr.
`--option KEY=VALUE` changes a policy of the model's tokenizer (e.g. unknown=to_unk, stop=strip_terminal).
An error about a record names the input file, the record and the position.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from biotf.commands.input_options import (add_input_arguments, add_precision_argument, add_tokenizer_options,
                                         as_option_errors, load_model, reader_options)
from biotf.commands.output_options import add_overwrite_argument, add_progress_argument, claim_outputs
from biotf.commands.parts import add_part_arguments, launch, run_file


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("predict", help="predictions of a fine-tuned model for a file of sequences",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, type=Path, metavar="RUN",
                        help="a fine-tuning run directory, or its exported model/ directory")
    add_input_arguments(parser)
    add_tokenizer_options(parser, "change a policy of the model's tokenizer, e.g. unknown=to_unk, "
                                  "stop=strip_terminal (repeatable; its vocabulary must stay the same)")
    parser.add_argument("--output", required=True, type=Path, metavar="OUT", help="the predictions (.tsv or .csv)")
    parser.add_argument("--batch-size", type=int, default=32, help="records per forward pass (default 32)")
    add_precision_argument(parser)
    parser.add_argument("--packing", action="store_true",
                        help="the records of a batch share rows, each attending to (and pooled over) itself alone: "
                             "the same predictions with fewer pad tokens (see README, Packing)")
    parser.add_argument("--max-length", type=int, metavar="N",
                        help="tokens a record is encoded to, special tokens included (default: the run's "
                             "data.max_length; past the model's max_seq_len, with a warning, where its positions "
                             "extend: rope, alibi)")
    add_progress_argument(parser)
    add_part_arguments(parser)
    add_overwrite_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from biotf.inference.predict import PredictRun, predict_file
    from biotf.conventions import counted

    with claim_outputs(args, {"--output": args.output}, [args.input]):
        launched = launch()
        model = load_model(args)
        with as_option_errors(model.tokenizer_options):
            summary = run_file(args, launched, lambda: predict_file(model, args.input, args.output,
                                                                    reader_options(args), args.batch_size,
                                                                    packing=args.packing, progress=not args.no_progress,
                                                                    max_length=args.max_length),
                               lambda: PredictRun(model, args.output, args.batch_size, input_path=args.input,
                                                  packing=args.packing,
                                                  progress=not args.no_progress and launched.rank == 0,
                                                  max_length=args.max_length))
        if summary is None:
            return 0
        print(f"{args.output}: {counted(summary.rows, 'prediction')} of {counted(summary.records, 'record')} "
              f"({summary.task}, from {args.model}{', packed rows' if args.packing else ''}; {model.precision})")
        print(f"policies: {summary.changed()}", file=sys.stderr)
        return 0
