"""Research experiments that answer "which architecture choice matters for my sequences?" in one command.

Each experiment trains a grid of runs with biotf's own training (Hydra config + `biotf.training.run.train`),
then writes `report.md` (markdown tables, the seed count, the published finding it tests) and a PNG
into its output directory. `compare` does the same table + curves for any set of run directories.

    extrapolation   train short, test long across position encodings (Press et al. 2022)
    norm-placement  Pre-LN vs Post-LN with and without warmup (Xiong et al. 2020)
    genome-annotation  per-base gene annotation of shipped genomes, train short / test long, against Prodigal

An experiment module may declare `Settings` (a dataclass): it then takes `--set name=value` settings and Hydra
overrides for every run (`run(out_dir, seeds, quick, settings, overrides)`).
"""

from __future__ import annotations

import importlib
from pathlib import Path

# name -> module with `run(out_dir, seeds, quick) -> report path`; imported on use (Lightning is heavy).
EXPERIMENTS = {"extrapolation": "biotf_recipes.experiments.extrapolation",
               "norm-placement": "biotf_recipes.experiments.norm_placement",
               "genome-annotation": "biotf_recipes.experiments.genome_annotation"}


def parse_settings(items: list[str]) -> dict[str, str]:
    """`NAME=VALUE` items as {name: value} (the value as given; a later name wins)."""
    from biotf.errors import ConfigError
    from biotf.naming import parameter

    settings = {}
    for item in items:
        name, equals, value = item.partition("=")
        if not equals or not name:
            raise ConfigError(parameter("settings"), item, "NAME=VALUE")
        settings[name.strip()] = value
    return settings


def run_experiment(name: str, out_dir: str | Path, seeds: tuple[int, ...], quick: bool = False,
                   settings: dict[str, str] | None = None, overrides: tuple[str, ...] = ()) -> Path:
    """Run experiment `name` into `out_dir` (finished runs there are reused); returns report.md's path.
    `settings` and `overrides` go to experiments that declare `Settings`; the others refuse them."""
    from biotf.errors import ConfigError
    from biotf.naming import Parameter, parameter

    if name not in EXPERIMENTS:
        raise ConfigError("experiment", name, " | ".join(EXPERIMENTS))
    if not seeds:
        raise ConfigError(parameter("seeds"), list(seeds), "one or more integers")
    module = importlib.import_module(EXPERIMENTS[name])
    if not hasattr(module, "Settings"):
        if settings or overrides:
            takes = [n for n in EXPERIMENTS if hasattr(importlib.import_module(EXPERIMENTS[n]), "Settings")]
            raise ConfigError(Parameter(f"{parameter('settings')} / {parameter('overrides')}"), " ".join([*(settings or {}), *overrides]),
                              reason=f"experiment {name} takes none (experiments that do: {', '.join(takes)})")
        return module.run(Path(out_dir), tuple(seeds), quick)
    return module.run(Path(out_dir), tuple(seeds), quick, settings or {}, tuple(overrides))
