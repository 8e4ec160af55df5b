"""Training runs as data: read run directories, tell diverged runs apart, group seeds, train one job.

A run directory is what `biotf.training.run.train` writes: `config.yaml` (the resolved config),
`metrics.csv` (Lightning's CSV logger: one row per logging event, columns such as `train/loss`,
`val/loss`), `summary.json`. Experiments and `biotf compare` read them all through `read_run`, so
"final metric", "diverged" and "which runs are seeds of one setting" mean the same everywhere.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from biotf.errors import BiotfError, ConfigError, InputError
from biotf.naming import parameter
from biotf.training.rundir import RESOLVED_CONFIG, changed_settings, flatten, read_run_config
from biotf.training.summary import SUMMARY_JSON  # written when training finished
from biotf.untrusted import read_json_object

if TYPE_CHECKING:
    from biotf.training.train_config import TrainConfig

METRICS_FILE = "metrics.csv"
ERROR_FILE = "error.txt"  # written by `train_job` when training raised, so the run is reported, not lost
# Config keys that differ between runs without making them different settings.
NOT_SETTINGS = frozenset({"seed", "data.cache_dir", "ckpt_path"})
LOSS_METRICS = ("val/loss", "train/loss")
# A validation loss that ends this many times above its own minimum has blown up (a real run's loss
# wanders by a few percent at most; a Post-LN blow-up or a NaN-free explosion jumps far beyond).
EXPLODED_FACTOR = 1.5


@dataclass
class Run:
    """One run directory: its flattened config and one (step, value) curve per logged metric."""

    directory: Path
    config: dict[str, Any]
    curves: dict[str, list[tuple[int, float]]]
    error: str | None = None  # the training error, when `train_job` recorded one
    summary: dict[str, Any] | None = None  # summary.json (final loss, unigram baseline), when training finished

    @property
    def seed(self) -> Any:
        return self.config.get("seed")

    def values(self, metric: str) -> list[float]:
        return [value for _, value in self.curves.get(metric, [])]

    def final(self, metric: str) -> float | None:
        values = self.values(metric)
        return values[-1] if values else None

    def best(self, metric: str) -> float | None:
        """The lowest finite value: metrics compared here are losses (lower is better)."""
        finite = [v for v in self.values(metric) if math.isfinite(v)]
        return min(finite) if finite else None

    @property
    def last_step(self) -> int | None:
        steps = [step for curve in self.curves.values() for step, _ in curve]
        return max(steps) if steps else None

    @property
    def divergence(self) -> str | None:
        """Why the run counts as diverged (training error, non-finite or exploded loss), or None."""
        if self.error is not None:
            return f"failed: {self.error}"
        for metric in LOSS_METRICS:
            if any(not math.isfinite(v) for v in self.values(metric)):
                return f"non-finite {metric}"
        final, best = self.final("val/loss"), self.best("val/loss")
        if final is not None and best is not None and best > 0 and final > EXPLODED_FACTOR * best:
            return f"val/loss exploded ({best:.3g} -> {final:.3g})"
        return None


def group_status(runs: list[Run]) -> str:
    """The status cell of a setting's runs: "ok", or "DIVERGED k/n: <first reason>"."""
    failures = [run.divergence for run in runs if run.divergence]
    return "ok" if not failures else f"DIVERGED {len(failures)}/{len(runs)}: {failures[0]}"


def metric_column(name: str, available: list[str]) -> str:
    """`val_loss` or `val/loss` -> the CSV column `val/loss`; unknown names list the allowed ones."""
    for candidate in (name, name.replace("_", "/", 1)):
        if candidate in available:
            return candidate
    raise ConfigError(parameter("metric"), name, ", ".join(sorted(available)) or "none: no metrics were logged")


def read_metrics(path: Path) -> dict[str, list[tuple[int, float]]]:
    """Per metric, (step, value) sorted by step; a step logged twice keeps its last value
    (training logs the final validation once more after fit)."""
    by_metric: dict[str, dict[int, float]] = {}
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        try:
            for row in reader:
                step = int(row["step"])
                for name, value in row.items():
                    if name not in ("step", "epoch") and value not in ("", None):
                        by_metric.setdefault(name, {})[step] = float(value)  # "nan"/"inf" parse as such
        except (UnicodeDecodeError, ValueError, KeyError, TypeError, csv.Error) as error:
            raise InputError(f"{path}: line {reader.line_num}: not a metrics file written by training "
                             f"({type(error).__name__}: {error})") from None
    return {name: sorted(points.items()) for name, points in by_metric.items()}


def read_run_file(path: Path, parse: Any) -> Any:
    """`parse(text)` of a run's YAML or text file; a damaged one is an InputError naming it, not a traceback."""
    try:
        return parse(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, yaml.YAMLError) as error:
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise InputError(f"{path}: damaged run file ({reason})") from None


def read_run(directory: str | Path) -> Run:
    """The run in `directory`; a missing metrics.csv (training never logged) is an empty curve set."""
    directory = Path(directory)
    config_path = directory / RESOLVED_CONFIG
    config = flatten(read_run_file(config_path, yaml.safe_load) or {}) if config_path.is_file() else {}
    metrics_path = directory / METRICS_FILE
    curves = read_metrics(metrics_path) if metrics_path.is_file() else {}
    error_path = directory / ERROR_FILE
    error = read_run_file(error_path, str.strip) if error_path.is_file() else None
    if not curves and error is None:
        raise InputError(f"{directory} is not a training run: it has no {METRICS_FILE} and no {ERROR_FILE}")
    summary_path = directory / SUMMARY_JSON
    summary = read_json_object(summary_path, "run summary") if summary_path.is_file() else None
    return Run(directory, config, curves, error, summary)


def find_runs(paths: list[str | Path]) -> list[Path]:
    """Run directories among `paths`: each path is a run (holds metrics.csv or error.txt) or a folder
    searched recursively (a Hydra multirun, an experiment's output); sorted, each once."""
    found: list[Path] = []
    for path in map(Path, paths):
        if not path.exists():
            raise InputError(f"run directory {path} does not exist")
        if (path / METRICS_FILE).is_file() or (path / ERROR_FILE).is_file():
            found.append(path)
            continue
        below = sorted({p.parent for pattern in (METRICS_FILE, ERROR_FILE) for p in path.rglob(pattern)})
        if not below:
            raise InputError(f"{path} holds no training run (no {METRICS_FILE} in it or below it)")
        found.extend(below)
    return sorted(dict.fromkeys(p.resolve() for p in found))


def varying_keys(runs: list[Run]) -> list[str]:
    """Config keys whose value differs between runs (seed and paths excluded): what the runs compare.
    Only keys every configured run has count: a key missing from older runs is a field added to the
    schema since, not a setting someone chose."""
    configs = [set(run.config) for run in runs if run.config]
    keys = sorted(set.intersection(*configs) - NOT_SETTINGS) if configs else []
    return [key for key in keys if len({repr(run.config.get(key)) for run in runs}) > 1]


def group_by_setting(runs: list[Run]) -> dict[str, list[Run]]:
    """Runs keyed by a label of their varying settings; runs that differ only by seed share a group.
    Runs without a config (or identical ones) are labelled by their directory."""
    keys = varying_keys(runs)
    groups: dict[str, list[Run]] = {}
    for run in runs:
        label = ", ".join(f"{key}={run.config.get(key)}" for key in keys) if keys and run.config else ""
        groups.setdefault(label or run.directory.name, []).append(run)
    return groups


def compose_config(overrides: list[str]) -> TrainConfig:
    """A validated `TrainConfig` for Hydra `overrides` (as `python train.py overrides` would run);
    a bad override is one ConfigError line."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from biotf.conventions import CONF_DIR
    from biotf.training.train_config import describe, register_configs, validate

    register_configs()
    try:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="experiment"):
            return validate(compose(config_name="config", overrides=overrides))
    except (HydraException, OmegaConfBaseException) as error:
        raise ConfigError("overrides", " ".join(overrides), reason=describe(error)) from None


def train_job(config: TrainConfig, run_dir: Path) -> Run:
    """Train `config` into `run_dir` with biotf's training (a fine-tuning run when it names a `task`, as
    `python train.py` does), unless a finished run is already there (an interrupted experiment restarts where it
    stopped). A run whose training raises is recorded in error.txt and reported as failed instead of ending the
    whole experiment."""
    from biotf.finetune.results import RESULT_FILE
    from biotf.finetune.finetune_run import train_task
    from biotf.training.train_config import to_plain
    from biotf.training.run import train

    if (run_dir / (SUMMARY_JSON if config.task is None else RESULT_FILE)).is_file():
        stored = read_run_config(run_dir / RESOLVED_CONFIG)
        wanted = flatten(to_plain(config))
        changed = changed_settings(stored, wanted)
        if changed:
            raise InputError(f"{run_dir} holds a finished run with another {changed[0]} "
                             f"({stored[changed[0]]!r}, now {wanted[changed[0]]!r}): choose a new output directory")
    else:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / ERROR_FILE).unlink(missing_ok=True)
        try:
            (train if config.task is None else train_task)(config, run_dir)
        except (BiotfError, RuntimeError, ValueError) as error:  # e.g. a NaN that breaks a kernel
            (run_dir / ERROR_FILE).write_text(f"{type(error).__name__}: {error}".splitlines()[0] + "\n",
                                              encoding="utf-8")
    return read_run(run_dir)


def curve_series(runs: list[Run], metric: str) -> dict[float, list[float]]:
    """step -> the value of `metric` in each of `runs` (seeds of one setting) at that step."""
    series: dict[float, list[float]] = {}
    for run in runs:
        for step, value in run.curves.get(metric, []):
            series.setdefault(step, []).append(value)
    return series
