"""`python train.py [overrides]` and `biotf train [overrides]`: compose with Hydra, validate, train.

Before Hydra runs anything, `preflight` composes the config for the given overrides (each value of
a `-m` sweep in turn) and validates it, so a bad override, an unknown experiment or a missing data
file stops the command at once with one line on stderr and exit status 2, before any data is read
or any run directory is created. Hydra then runs the job(s) as usual (run directories, multirun,
and Lightning's DDP relaunch, which re-runs this script in each worker process).
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from hydra import compose, initialize_config_dir
from hydra._internal.utils import get_args_parser
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from biotf.errors import BiotfError
from biotf.training.config import CONF_DIR, register_configs, validate

register_configs()


def describe(error: Exception) -> str:
    """One line for a configuration error, naming the key and the allowed values where Hydra knows them."""
    if isinstance(error, MissingConfigException) and error.options is not None and error.missing_cfg_file:
        group, _, name = error.missing_cfg_file.rpartition("/")
        return f"invalid config {group}={name!r}: no such option (allowed: {', '.join(sorted(error.options))})"
    parts = [str(error)]
    if error.__cause__ is not None and str(error.__cause__) not in parts[0]:
        parts.append(str(error.__cause__))
    lines = [line.strip() for part in parts for line in part.splitlines() if line.strip()]
    return "; ".join(lines)


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


def preflight(overrides: list[str]) -> None:
    """Compose and validate every job the overrides describe; raises on the first bad one."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="train"):
        for combo in _expand_sweeps(overrides):
            validate(compose(config_name="config", overrides=combo))


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def _hydra_job(cfg: DictConfig) -> float:
    """One Hydra job; returns the final validation loss (the objective a Hydra sweeper minimises)."""
    from biotf.training.finetune import train_task  # Lightning is imported only once a job really runs
    from biotf.training.run import train

    try:
        config = validate(cfg)
        run = train if config.task is None else train_task  # a task fine-tunes (biotf.training.finetune)
        return run(config, Path(HydraConfig.get().runtime.output_dir)).final_val_loss
    except BiotfError as error:
        print(f"train: error: {error}", file=sys.stderr)
        sys.exit(2)


def main(argv: list[str] | None = None, script: str | None = None) -> int:
    """Run training with Hydra command-line arguments `argv` (default: sys.argv[1:]).

    `script` is the file Lightning re-runs for DDP worker processes (default: the current sys.argv[0]).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    script = script or sys.argv[0]
    args = get_args_parser().parse_args(argv)
    if not (args.help or args.hydra_help or args.info or args.cfg or args.shell_completion):
        try:
            preflight(args.overrides)
        except (BiotfError, HydraException, OmegaConfBaseException) as error:
            print(f"{Path(script).name}: error: {describe(error)}", file=sys.stderr)
            return 2
    sys.argv = [script, *argv]  # hydra.main and Lightning's DDP launcher both read sys.argv
    try:
        _hydra_job()
    except SystemExit as exit_:  # a job's BiotfError (status 2) or Hydra's own error exit
        return exit_.code if isinstance(exit_.code, int) else 1
    return 0
