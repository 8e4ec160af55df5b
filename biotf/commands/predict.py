"""`biotf predict`: a fine-tuned model's predictions for every record of a file, one row per record.

    biotf predict --model outputs/finetune/<run> --input proteins.fasta --output predictions.tsv
    biotf predict --model <run>/model --input splice.csv --id-column instance_name --output splice.csv
    biotf predict --model <run> --input molecules.csv --column smiles --option unknown=to_unk --output p.tsv

Columns: id, prediction (the class name, the value in the label's unit, or one label character per residue),
and for classification one probability column per class (p_<class>). The output is tab-separated unless its
name ends in .csv. Records are encoded as in training (the run's max_length and long_policy); records cut or
dropped by that policy, and what the reader's and the tokenizer's policies changed, are counted on stderr.
`--option KEY=VALUE` changes a policy of the model's tokenizer (e.g. unknown=to_unk, stop=strip_terminal).
An error about a record names the input file, the record and the position.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import Counter
from pathlib import Path

from biotf.commands.input_options import (add_input_arguments, add_tokenizer_options, as_option_errors, parse_options,
                                         reader_options)
from biotf.commands.output_options import add_overwrite_argument, prepare_outputs


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
    add_overwrite_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from biotf.checkpoint.files import atomic_write
    from biotf.data.readers import read_records
    from biotf.errors import ConfigError
    from biotf.inference.task import encode_for_task, load_task_model, predict
    from biotf.tokenizers.base import PolicyStats

    if args.batch_size < 1:
        raise ConfigError("--batch-size", args.batch_size, "an integer >= 1")
    prepare_outputs(args, {"--output": args.output}, [args.input])
    tokenizer_options = parse_options(args.option)
    with as_option_errors(tokenizer_options):
        model, tokenizer, info = load_task_model(args.model, tokenizer_options)
    classes = info.classes
    header = ["id", "prediction"] + ([f"p_{c}" for c in classes] if info.task == "classification" else [])
    counts: Counter = Counter()  # records cut or dropped by the run's long_policy
    policies = PolicyStats()  # what the reader's and the tokenizer's policies changed
    rows: list[list[str]] = []

    def flush(batch: list[tuple[str, np.ndarray]]) -> None:
        predictions, scores = predict(model, tokenizer, [ids for _, ids in batch])
        for (record, ids), predicted, score in zip(batch, predictions, scores):
            if info.task == "regression":
                rows.append([record, f"{float(predicted[0]):.6g}"])
            elif info.task == "token":
                content = ~np.isin(ids, list(tokenizer.special_ids))
                rows.append([record, "".join(classes[int(c)] for c in predicted[:len(ids)][content])])
            else:
                rows.append([record, classes[int(predicted)], *(f"{p:.6f}" for p in score)])

    batch: list[tuple[str, np.ndarray]] = []
    records = 0
    for record in read_records(args.input, reader_options(args), policies):
        records += 1
        ids = encode_for_task(tokenizer, record.sequence, record.id, info.max_length, info.long_policy, counts,
                              policies, args.input)
        if ids is not None:
            batch.append((record.id, ids))
        if len(batch) == args.batch_size:
            flush(batch)
            batch = []
    if batch:
        flush(batch)

    delimiter = "," if args.output.suffix.lower() == ".csv" else "\t"

    def write(path: Path) -> None:
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle, delimiter=delimiter, lineterminator="\n")
            writer.writerow(header)
            writer.writerows(rows)

    atomic_write(args.output, write)
    print(f"{args.output}: {len(rows)} predictions of {records} records ({info.task}, from {args.model})")
    changed = [f"{n} {why}" for why, n in counts.items()] + [f"{key}={n}" for key, n in sorted(policies.items())]
    print(f"policies: {', '.join(changed) or 'nothing changed'}", file=sys.stderr)
    return 0
