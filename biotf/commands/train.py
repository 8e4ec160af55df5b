"""`biotf train [hydra overrides]`: the same as `python train.py [overrides]` (configs in conf/)."""

from __future__ import annotations

import argparse


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train", help="train a model (Hydra overrides, e.g. experiment=dna_mlm trainer.max_steps=100)",
        description="Train with Hydra overrides, exactly as `python train.py` does; see conf/config.yaml.",
        add_help=False)  # --help goes to Hydra, which lists the config groups
    parser.add_argument("overrides", nargs=argparse.REMAINDER, help="Hydra overrides and flags (-m, --cfg job, ...)")
    parser.set_defaults(run=run, forwards_flags=True)


def run(args: argparse.Namespace) -> int:
    from biotf.entry import train as entry

    # Lightning's DDP launcher re-runs sys.argv[0] in each worker process: point it at the entry module's file,
    # which runs as a script too, so that an installed wheel (no train.py) can launch workers.
    return entry.main(args.overrides, script=entry.__file__, prog="biotf train")
