"""`biotf experiment NAME`: train an experiment's grid of runs and write report.md plus a PNG.

    biotf experiment extrapolation                  # train short (128), test long (up to 1024)
    biotf experiment norm-placement --seeds 0 1 2   # Pre-LN vs Post-LN x warmup x two learning rates
    biotf experiment extrapolation --quick          # a few steps per run: checks the pipeline, not a result

Finished runs in --out are reused, so an interrupted experiment continues where it stopped.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from biotf.experiments import EXPERIMENTS

    parser = subparsers.add_parser("experiment", help="run a research experiment and write its report",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", choices=list(EXPERIMENTS), help="which experiment")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], metavar="SEED",
                        help="one run per seed and setting; with several, reports show the spread (default: 0)")
    parser.add_argument("--quick", action="store_true", help="a few steps per run (under 3 minutes on a CPU)")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="output directory (default: outputs/experiments/NAME/<date_time>)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from biotf.experiments import run_experiment

    out = args.out or Path("outputs/experiments") / args.name / time.strftime("%Y-%m-%d_%H-%M-%S")
    report = run_experiment(args.name, out, tuple(args.seeds), args.quick)
    print(f"experiment {args.name}: report {report}", file=sys.stderr)
    return 0
