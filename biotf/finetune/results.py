"""What a fine-tuning run reports: split.tsv, predictions_test.tsv and finetune.json (`FinetuneSummary`).

Every file is written atomically (`atomic_write_text`): it appears complete under its name, or not at all.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from biotf.io.atomic import atomic_write_text
from biotf.data.labels import label_text
from biotf.data.long_policy import CROPPED
from biotf.data.splits import read_sides
from biotf.errors import InputError
from biotf.conventions import IGNORE_INDEX, listed
from biotf.finetune.labelled import LabelledSet

RESULT_FILE = "finetune.json"
PREDICTIONS_FILE = "predictions_test.tsv"


def write_predictions(path: Path, data: LabelledSet, rows: np.ndarray, predictions: list[np.ndarray], task: str) -> None:
    """predictions_test.tsv: each of `rows`' label and prediction as text (class names, values, label strings)."""
    lines = ["id\tlabel\tprediction"]
    for row, predicted in zip(rows, predictions):
        if task == "token":  # predictions over the padded width: keep the labelled (content) positions
            predicted = np.where(data.labels[row] != IGNORE_INDEX, np.ravel(predicted)[:len(data.labels[row])],
                                 IGNORE_INDEX)
        lines.append(f"{data.ids[row]}\t{label_text(data.labels[row], data.classes, task)}\t"
                     f"{label_text(predicted, data.classes, task)}")
    atomic_write_text(path, "\n".join(lines) + "\n")


def check_same_split(path: Path, ids: list[str], sides: np.ndarray) -> None:
    """A resume must train on the split the run began with: refuse one whose recomputed split (from data.path,
    the split settings and the seed) differs from the run's split.tsv, naming how many records moved."""
    if not path.is_file():
        return
    stored = read_sides(path)
    now = dict(zip(ids, map(str, sides)))
    moved = sorted(i for i in stored.keys() | now.keys() if stored.get(i) != now.get(i))
    if moved:
        first = moved[0]
        raise InputError(f"resuming: {len(moved)} records would change sides against {path} (e.g. {first!r}: "
                         f"{stored.get(first, 'absent')} -> {now.get(first, 'absent')}); resume with the run's "
                         "data, split settings and seed (its config.yaml), or start a new run")


@dataclass
class FinetuneSummary:
    experiment: str
    task: str
    mode: str
    init_from: str  # as given
    init_from_resolved: str  # absolute: the model it started from, wherever the command ran
    run_dir: str
    parameters: int
    trainable_parameters: int
    steps: int
    train_seconds: float
    max_length: int  # tokens per record: data.max_length, or the model's max_seq_len when that was null
    split: dict[str, Any]
    dropped: dict[str, int]  # records left out, by reason
    cropped: int  # records kept but cut to their first max_length tokens (data.long_policy=crop)
    best_checkpoint: str
    best_step: int  # the optimizer step whose weights the best checkpoint holds (and the export)
    validation: dict[str, float]
    test: dict[str, float]
    classes: list[str] | None
    policies: dict[str, int] = dataclasses.field(default_factory=dict)  # what reader and tokenizer policies changed
    resolution: str = "base"  # of a token head: base | bin (finetune.resolution)
    bin_labels: dict[str, int] | None = None  # at bin resolution: what the majority rule did (`count_bin_labels`)
    left_out_ids: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # ids of records a step left out

    @property
    def final_val_loss(self) -> float:  # what a Hydra sweeper minimises, as for language-model runs
        return self.validation["loss"]

    def text(self) -> str:
        def row(metrics: dict[str, float]) -> str:
            return ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())

        sizes = ", ".join(f"{k} {v}" for k, v in self.split["records"].items())
        lines = [f"biotf fine-tuning summary: {self.experiment} (task {self.task}, mode {self.mode}, "
                 f"{self.trainable_parameters:,} of {self.parameters:,} parameters trained)",
                 f"  from {self.init_from}; {self.steps} steps, {self.train_seconds:.0f} s, "
                 f"max_length {self.max_length}",
                 f"  run directory: {self.run_dir}",
                 f"  split {self.split['method']}: {sizes} records in {self.split['groups']} groups",
                 f"  best checkpoint: step {self.best_step} ({self.best_checkpoint})",
                 f"  best checkpoint, validation: {row(self.validation)}",
                 f"  best checkpoint, test:       {row(self.test)}"]
        if self.dropped:
            lines.append("  left out: " + ", ".join(f"{n} {why}" for why, n in self.dropped.items()))
        for why, ids in self.left_out_ids.items():  # finetune.json lists every one
            lines.append(f"  left out, {why}: {listed(ids)}")
        if self.cropped:
            lines.append(f"  kept but cut: {self.cropped} {CROPPED}")
        if self.policies:
            lines.append("  policies: " + ", ".join(f"{key}={n}" for key, n in self.policies.items()))
        if self.bin_labels is not None:
            b = self.bin_labels
            lines.append(f"  bin labels (majority of each bin's tokens): {b['labelled_bins']} of {b['bins']} bins "
                         f"labelled; {b['outvoted_tokens']} of {b['labelled_tokens']} labelled tokens outvoted")
        return "\n".join(lines)

    def write(self, run_dir: Path) -> None:
        atomic_write_text(run_dir / RESULT_FILE, json.dumps(dataclasses.asdict(self), indent=2) + "\n")
