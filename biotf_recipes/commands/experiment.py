"""`biotf experiment NAME`: train an experiment's grid of runs and write report.md plus a PNG.

    biotf experiment extrapolation                  # train short (128), test long (up to 1024); seeds 0 1 2
    biotf experiment norm-placement --seeds 0       # Pre-LN vs Post-LN x warmup x two learning rates, one seed
    biotf experiment extrapolation --quick          # a few steps per run, one seed: checks the pipeline only
    biotf experiment genome-annotation --quick      # per-base gene annotation vs Prodigal at 1-4 kb contexts
    biotf experiment genome-annotation --set eval_contexts=4096,16384 model.d_model=128   # settings, overrides

Finished runs in --out are reused, so an interrupted experiment continues where it stopped.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

# Three seeds by default, so that every table and plot shows the spread (affordable on a CPU: README,
# Experiments, "Time"); --quick checks the pipeline, for which one seed is enough.
DEFAULT_SEEDS = (0, 1, 2)
QUICK_SEEDS = (0,)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    from biotf_recipes.experiments import EXPERIMENTS

    parser = subparsers.add_parser("experiment", help="run a research experiment and write its report",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", choices=list(EXPERIMENTS), help="which experiment")
    parser.add_argument("--seeds", type=int, nargs="+", metavar="SEED",
                        help="one run per seed and setting; reports show the spread over seeds "
                             f"(default: {' '.join(map(str, DEFAULT_SEEDS))}; with --quick: {QUICK_SEEDS[0]})")
    parser.add_argument("--quick", action="store_true", help="a few steps per run (under 3 minutes on a CPU)")
    parser.add_argument("--set", dest="settings", action="append", default=[], metavar="NAME=VALUE",
                        help="an experiment setting (genome-annotation: contexts, held-out region, genomes, ...; "
                             "lists comma-separated)")
    parser.add_argument("overrides", nargs="*", metavar="OVERRIDE",
                        help="Hydra overrides for every run of the experiment (genome-annotation), e.g. model.d_model=128")
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="output directory (default: outputs/experiments/NAME/<date_time>)")
    parser.set_defaults(run=run, forwards_flags=True,  # overrides may follow the options (biotf.cli.main)
                        parameter_flags={"out_dir": "--out"})


def run(args: argparse.Namespace) -> int:
    from biotf_recipes.experiments import parse_settings, run_experiment

    out = args.out or Path("outputs/experiments") / args.name / time.strftime("%Y-%m-%d_%H-%M-%S")
    seeds = tuple(args.seeds) if args.seeds else QUICK_SEEDS if args.quick else DEFAULT_SEEDS
    settings = parse_settings(args.settings)
    extra = {"settings": settings, "overrides": tuple(args.overrides)} if settings or args.overrides else {}
    report = run_experiment(args.name, out, seeds, args.quick, **extra)
    print(f"experiment {args.name}: report {report}", file=sys.stderr)
    return 0
