"""`biotf generate evaluate`: the MOSES metrics of a file of generated SMILES (`biotf_recipes.moses.benchmark`);
`biotf.commands.generate` adds it as the form `evaluate` of its command (the entry point `generate evaluate`), whose
help describes both forms."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from biotf.commands.input_options import add_input_arguments, reader_options
from biotf.commands.output_options import add_overwrite_argument, add_progress_argument, claim_outputs


def add_parser(forms: argparse._SubParsersAction, description: str) -> None:
    evaluate = forms.add_parser("evaluate", help="MOSES metrics of generated SMILES against reference sets",
                                description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_input_arguments(evaluate)
    references = evaluate.add_argument_group("reference sets (MOSES: test.csv.gz, test_scaffolds.csv.gz, "
                                             "train.csv.gz)")
    references.add_argument("--test", type=Path, metavar="FILE", help="FCD, SNN, Frag and Scaf .../Test against it")
    references.add_argument("--test-scaffolds", type=Path, metavar="FILE", help=".../TestSF against it")
    references.add_argument("--train", type=Path, metavar="FILE", help="novelty against it")
    references.add_argument("--reference-column", metavar="NAME",
                            help="the SMILES column of the reference CSVs (default: sequence, seq, smiles, ...)")
    references.add_argument("--cache-dir", type=Path, metavar="DIR",
                            help="where the reference statistics are cached (default .cache/biotf/moses)")
    evaluate.add_argument("--output", type=Path, metavar="FILE", help="the metrics as .tsv or .json")
    evaluate.add_argument("--batch-size", type=int, default=1024, metavar="B",
                          help="molecules through ChemNet at once (default 1024)")
    evaluate.add_argument("--device", default="cpu", help="torch device of ChemNet (default cpu)")
    add_progress_argument(evaluate)
    add_overwrite_argument(evaluate)
    evaluate.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """The metrics table on stdout (and --output), where each reference came from on stderr."""
    from biotf.io.readers import ReaderOptions
    from biotf.errors import check_int
    from biotf_recipes.moses.benchmark import (METRIC_FORMATS, checked_cache_dir, evaluate_file, metric_table,
                                                reference_lines, write_metrics)
    from biotf.io.outputs import output_format

    check_int("--batch-size", args.batch_size, 1)
    cache_dir = checked_cache_dir(args.cache_dir)
    tests = {name: path for name, path in {"Test": args.test, "TestSF": args.test_scaffolds}.items()
             if path is not None}
    inputs = [path for path in (args.input, args.test, args.test_scaffolds, args.train) if path is not None]
    if args.output is not None:
        output_format(args.output, METRIC_FORMATS, "--output")
    with claim_outputs(args, {"--output": args.output}, inputs):
        evaluation = evaluate_file(args.input, reader_options(args), tests, args.train,
                                   ReaderOptions(column=args.reference_column), cache_dir,
                                   args.batch_size, args.device, progress=not args.no_progress)
        if evaluation.references:
            print("\n".join(reference_lines(evaluation)), file=sys.stderr)
        if args.output is not None:
            write_metrics(args.output, evaluation)
        print(metric_table(evaluation))
        if evaluation.input_policies:
            print(f"reading {args.input}: {evaluation.input_policies.summary()}", file=sys.stderr)
        return 0
