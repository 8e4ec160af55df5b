"""What `embed`, `score` and `predict` share when `torchrun` launches them: `--part-records`, the run in parts
(`biotf.data.sharded`) and its one report, printed by rank 0, or else the plain run (`run_file`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from biotf.commands.input_options import reader_options


def add_part_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--part-records", type=int, default=1024, metavar="N",
                        help="under torchrun: records per part, the unit dealt to processes and kept for a resume "
                             "(default 1024)")


def launch() -> Any:
    """This process's `Launch` under torchrun, None for a plain run (which says so if parts of a sharded run over the
    same output wait to be resumed)."""
    from biotf.data.sharded import Launch

    return Launch.from_environment()


def note_waiting_parts(args: argparse.Namespace) -> None:
    """A plain run leaves a sharded run's parts alone; it says they are there."""
    from biotf.data.sharded import work_folder

    folder = work_folder(args.output)
    if folder.is_dir():
        print(f"biotf {args.command}: {folder} holds parts of an interrupted run under torchrun; this run (one "
              "process) does not use them: rerun the torchrun command to resume it", file=sys.stderr)


def run_in_parts(args: argparse.Namespace, work: Any, launched: Any) -> Any:
    """This rank's share of the run; rank 0 reports the parts and returns the `ShardedRun`, other ranks None."""
    from biotf.data.sharded import run_parts

    done = run_parts(work, args.input, args.output, launched, reader_options(args), args.part_records, args.overwrite)
    if done is not None:
        print(f"biotf {args.command}: {done.summary()}", file=sys.stderr)
    return done


def run_file(args: argparse.Namespace, launched: Any, plain: Callable[[], Any], work: Callable[[], Any]) -> Any:
    """The summary of a plain run (`launched` None: `plain()`, after saying whether parts of a sharded run wait), or
    under torchrun this rank's share of the parts of `work()`, whose summary (reader policies included) rank 0 gets;
    the other ranks get None."""
    if launched is None:
        note_waiting_parts(args)
        return plain()
    run = work()
    done = run_in_parts(args, run, launched)
    if done is None:
        return None
    summary = run.summary(done.counts)
    summary.policies.update(done.reader_policies)
    return summary
