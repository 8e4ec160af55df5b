"""`python train.py [overrides]` and `biotf train [overrides]`: compose with Hydra, validate, train: a language
model (`biotf.training.run`) or, when the config names a `task`, a fine-tuned one (`biotf.finetune.finetune_run`). It sits
above both packages (`biotf.training` never imports `biotf.finetune`), in a package of its own so that running this
file as a script (Lightning's DDP workers do) puts no folder on sys.path whose modules shadow others' (`biotf/`
holds `tokenizers/`, `biotf/commands/` `tokenize.py`).

Before Hydra runs anything, `preflight` composes the config for the given overrides (each value of
a `-m` sweep in turn) and validates it, so a bad override, an unknown experiment, a missing data
file, a run directory that holds another run or cannot be written (`rundir.check_writable`), a resume with
other settings than its run's (`rundir.check_resume`) stops the command at once with one line on stderr and exit
status 2, before any data is read or any run directory is created or touched (Hydra writes .hydra/ as the job
starts; into a directory that exists, such as a resumed run's, it writes them aside until the job accepts the run:
`pending_hydra_files`, so that a resume the job refuses leaves .hydra/ as it was). Hydra then runs the job(s) as
usual (run directories, multirun, and Lightning's DDP relaunch, which re-runs this script in each worker process).

Resuming (`ckpt_path=<run>/checkpoints/last.ckpt`) continues that run's directory unless
`hydra.run.dir` names another. A run stopped by SIGTERM exits with status 143 after saving
last.ckpt, printing the command that resumes it.

Launched by torchrun or srun (several nodes: `trainer.num_nodes`), every process runs this script itself, so each
would name a run directory by its own clock: such a launch must give `hydra.run.dir` (`check_launch`), and only
rank 0 writes Hydra's .hydra/ there.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import hydra
from hydra import compose, initialize_config_dir
from hydra._internal.utils import get_args_parser
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from biotf.errors import BiotfError, ConfigError, user_error
from biotf.conventions import CONF_DIR
from biotf.progress import messages_to_stderr
from biotf.training.train_config import TrainConfig, check_key, describe, register_configs, validate
from biotf.training.hints import command_line, hydra_override
from biotf.training.rundir import (PENDING_HYDRA_DIR, check_resume, check_run_dir, check_writable,
                                   checkpoint_run_dir, is_launch_rank_zero)
from biotf.training.summary import FinalCheck, FinalCheckRun

register_configs()


def _expand_sweeps(overrides: list[str]) -> list[list[str]]:
    """Override lists to check: each value of each sweep once, the other sweeps at their first value."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    choices = [[o.input_line] if not o.is_sweep_override() else
               [f"{o.get_key_element()}={value}" for value in o.sweep_string_iterator()] for o in parsed]
    combos = [[values[0] for values in choices]]
    for position, values in enumerate(choices):
        for value in values[1:]:
            combo = list(combos[0])
            combo[position] = value
            combos.append(combo)
    return combos


def _parsed(overrides: list[str]) -> list:
    return OverridesParser.create().parse_overrides(overrides)


def check_override_keys(overrides: list[str]) -> None:
    """Refuse an override of a key the schema lacks, with the closest key (a typo) and the allowed ones."""
    for override in _parsed(overrides):
        key = override.key_or_group
        if override.is_delete() or key.startswith("hydra") or "/" in key or "@" in key:
            continue
        check_key(key, override.input_line.partition("=")[2] if override.is_sweep_override() else override.value())


def refuse_tokenizer_overrides(overrides: list[str]) -> None:
    """A fine-tuning run's tokenizer is init_from's, so a `tokenizer...` override would change nothing: refused,
    naming the key that changes a policy of init_from's tokenizer instead."""
    for override in _parsed(overrides):
        key = override.key_or_group
        if key == "tokenizer" or key.startswith("tokenizer."):
            policy = key.partition(".")[2] or "<policy>"
            raise ConfigError(key, override.input_line.partition("=")[2],
                              reason="a fine-tuning run (task set) uses init_from's tokenizer; change one of its "
                                     f"policies with finetune.tokenizer_options.{policy}=<value>")


def resume_in_place(overrides: list[str]) -> list[str]:
    """The overrides, plus `hydra.run.dir=<run>` when they resume `<run>/checkpoints/*.ckpt` and name no
    run directory: a resume continues its run's directory (metrics appended, one summary of all steps)."""
    parsed = _parsed(overrides)
    if any(o.key_or_group == "hydra.run.dir" for o in parsed):
        return overrides
    for override in parsed:
        if override.key_or_group == "ckpt_path" and not override.is_sweep_override():
            run_dir = checkpoint_run_dir(str(override.value()))  # unquoted, as the config will hold it
            if run_dir is not None and run_dir.is_dir():
                return [*overrides, hydra_override("hydra.run.dir", run_dir)]
    return overrides


def launched_processes() -> int:
    """How many processes a torchrun or Slurm launch started (1 without one; Lightning's own DDP workers carry
    the run directory rank 0 chose, so they pass `check_launch` whatever this says)."""
    for name in ("WORLD_SIZE", "SLURM_STEP_NUM_TASKS"):  # torchrun; srun (a batch script alone: 1 task)
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 1


def check_launch(overrides: list[str]) -> list[str]:
    """The overrides of one process of a launch over several: a run directory is required (one for all processes,
    see the module docstring); ranks other than 0 leave Hydra's .hydra/ to rank 0."""
    processes = launched_processes()
    if processes < 2:
        return overrides
    keys = {o.key_or_group for o in _parsed(overrides)}
    if "hydra.run.dir" not in keys:
        raise ConfigError("hydra.run.dir", None, reason=f"this process is one of {processes} that torchrun or srun "
                          "started, and each would name its own run directory by the clock: give "
                          "hydra.run.dir=DIR, the same on every node")
    if is_launch_rank_zero() or "hydra.output_subdir" in keys:
        return overrides
    return [*overrides, "hydra.output_subdir=null"]


def pending_hydra_files(overrides: list[str]) -> list[str]:
    """The overrides, plus `hydra.output_subdir=<PENDING_HYDRA_DIR>` when they name a run directory that exists (a
    resume in place): the job moves Hydra's files into .hydra/ once it accepts the run (`rundir.adopt_hydra_files`),
    and a run it refuses leaves the .hydra/ of the run the directory holds as it was."""
    parsed = {o.key_or_group: o for o in _parsed(overrides)}
    run_dir = parsed.get("hydra.run.dir")
    if (run_dir is None or run_dir.is_sweep_override() or "hydra.output_subdir" in parsed
            or not Path(str(run_dir.value())).is_dir()):
        return overrides
    return [*overrides, hydra_override("hydra.output_subdir", PENDING_HYDRA_DIR)]


def preflight(overrides: list[str], multirun: bool = False) -> None:
    """Compose and validate every job the overrides describe, and check a single run's directory; raises on
    the first problem."""
    check_override_keys(overrides)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="train"):
        for combo in _expand_sweeps(overrides):
            cfg = compose(config_name="config", overrides=combo, return_hydra_config=not multirun)
            config = validate(cfg)
            check_resume(config)
            if config.task is not None:
                refuse_tokenizer_overrides(combo)
            # Rank 0 only: the DDP workers Lightning launches re-run this in the directory rank 0 holds.
            if not multirun and is_launch_rank_zero():
                check_run_dir(Path(cfg.hydra.run.dir), config.ckpt_path)
                check_writable(Path(cfg.hydra.run.dir))


def final_checks(config: TrainConfig) -> list[FinalCheckRun]:
    """The figures a language-model run ends with besides its loss: `trainer.validity_samples` SMILES drawn and
    parsed (`biotf.inference.validity`)."""
    if not config.trainer.validity_samples:
        return []
    from biotf.inference.validity import sample_validity

    def validity(model, tokenizer) -> FinalCheck:
        found = sample_validity(model, tokenizer, config.trainer.validity_samples, config.seed)
        return FinalCheck("sample_validity", found.line, {"validity": found.validity, "samples": found.samples,
                                                          "valid": found.valid, "unique": found.unique,
                                                          "seconds": found.seconds})

    return [validity]


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def _hydra_job(cfg: DictConfig) -> float:
    """One Hydra job; returns the final validation loss (the objective a Hydra sweeper minimises)."""
    from biotf.training.callbacks import SIGTERM_STATUS, RunInterrupted
    from biotf.finetune.finetune_run import train_task  # Lightning is imported only once a job really runs
    from biotf.training.run import train

    try:
        config = validate(cfg)
        run_dir = Path(HydraConfig.get().runtime.output_dir)
        if config.task is not None:  # a task fine-tunes (biotf.finetune.finetune_run); rank 0 measures
            summary = train_task(config, run_dir)
            return summary.final_val_loss if summary is not None else float("nan")
        return train(config, run_dir, final_checks(config)).final_val_loss
    except (BiotfError, OSError) as caught:  # an OSError: a write the system refused that no writer named
        error = user_error(caught)
        if error is None:
            raise
        print(f"train: error: {error}", file=sys.stderr)
        sys.exit(2)
    except RunInterrupted as stop:
        if is_launch_rank_zero():
            resume = ""
            if stop.path is not None:
                overrides = [o for o in HydraConfig.get().overrides.task if not o.startswith("ckpt_path=")]
                resume = "; resume with: " + command_line("python", sys.argv[0], *overrides,
                                                          hydra_override("ckpt_path", stop.path))
            print(f"train: {stop}{resume}", file=sys.stderr)
        sys.exit(SIGTERM_STATUS)


def main(argv: list[str] | None = None, script: str | None = None, prog: str | None = None) -> int:
    """Run training with Hydra command-line arguments `argv` (default: sys.argv[1:]).

    `script` is the file Lightning re-runs for DDP worker processes (default: the current sys.argv[0]);
    `prog` names the command in error lines (default: the script's file name). What training says on stderr never
    fails it, nor goes to stdout (`messages_to_stderr`).
    """
    with messages_to_stderr():
        return _main(argv, script, prog)


def _main(argv: list[str] | None, script: str | None, prog: str | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    script = script or sys.argv[0]
    prog = prog or Path(script).name
    args = get_args_parser().parse_args(argv)
    if not (args.help or args.hydra_help or args.info or args.cfg or args.shell_completion):
        try:
            if not args.multirun:
                overrides = pending_hydra_files(check_launch(resume_in_place(args.overrides)))
                argv += overrides[len(args.overrides):]
                args.overrides = overrides
            preflight(args.overrides, multirun=args.multirun)
        except (BiotfError, HydraException, OmegaConfBaseException) as error:
            print(f"{prog}: error: {describe(error)}", file=sys.stderr)
            return 2
    sys.argv = [script, *argv]  # hydra.main and Lightning's DDP launcher both read sys.argv
    try:
        _hydra_job()
    except SystemExit as exit_:  # a job's BiotfError (status 2) or Hydra's own error exit
        return exit_.code if isinstance(exit_.code, int) else 1
    return 0


if __name__ == "__main__":  # the script Lightning's DDP launcher re-runs for `biotf train` (see commands/train.py)
    sys.exit(main())
