"""Research experiments that answer "which architecture choice matters for my sequences?" in one command.

Each experiment trains a grid of runs with biotf's own training (Hydra config + `biotf.training.run.train`),
then writes `report.md` (markdown tables, the seed count, the published finding it tests) and a PNG
into its output directory. `compare` does the same table + curves for any set of run directories.

    extrapolation   train short, test long across position encodings (Press et al. 2022)
    norm-placement  Pre-LN vs Post-LN with and without warmup (Xiong et al. 2020)
"""

from __future__ import annotations

import importlib
from pathlib import Path

# name -> module with `run(out_dir, seeds, quick) -> report path`; imported on use (Lightning is heavy).
EXPERIMENTS = {"extrapolation": "biotf.experiments.extrapolation",
               "norm-placement": "biotf.experiments.norm_placement"}


def run_experiment(name: str, out_dir: str | Path, seeds: tuple[int, ...], quick: bool = False) -> Path:
    """Run experiment `name` into `out_dir` (finished runs there are reused); returns report.md's path."""
    from biotf.errors import ConfigError

    if name not in EXPERIMENTS:
        raise ConfigError("experiment", name, " | ".join(EXPERIMENTS))
    if not seeds:
        raise ConfigError("--seeds", list(seeds), "one or more integers")
    return importlib.import_module(EXPERIMENTS[name]).run(Path(out_dir), tuple(seeds), quick)
