"""`biotf compare RUNS... --metric val_loss --out report.md`: final metrics table and curves of any runs.

    biotf compare multirun/protein_mlm/2026-11-29_18-00-00 --metric val_loss --out sweep.md
    biotf compare outputs/protein_mlm/run_a outputs/protein_mlm/run_b --metric val_acc --out ab.md

Each path is a run directory or a folder searched for them. Rows are the config settings that differ
between runs; runs differing only by seed form one row with their spread. Diverged runs are marked.
The plot is written beside the report (same name, .png).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from biotf.commands.output_options import add_overwrite_argument, claim_outputs


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("compare", help="table and curves comparing training runs",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="run directories or folders holding them")
    parser.add_argument("--metric", default="val_loss",
                        help="logged metric, e.g. val_loss, val_acc, train_loss (default: val_loss)")
    parser.add_argument("--out", type=Path, default=Path("report.md"), metavar="MD",
                        help="markdown report; the PNG goes beside it (default: report.md)")
    add_overwrite_argument(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from biotf_recipes.experiments.compare import compare

    with claim_outputs(args, {"--out": args.out, "--out (its picture)": args.out.with_suffix(".png")}, [],
                       images=("--out (its picture)",)):
        report, picture = compare(args.runs, args.metric, args.out)
        print(f"compare: {report} and {picture}", file=sys.stderr)
        return 0
