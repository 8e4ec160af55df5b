"""A fine-tuned model's predictions for every record of a file (`biotf predict`), one row per record.

Columns: id, prediction (the class name, the value in the label's unit, or one label character per residue), and
for classification one probability column per class (p_<class>); tab-separated unless the output ends in .csv.
Records are encoded as in training (the run's max_length and long_policy, `encode_for_task`); records cut or dropped
by that policy are counted.
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from biotf.atomic import atomic_write
from biotf.checkpoint.task_model import TaskInfo, load_task_model
from biotf.data.collators import content_mask, pad_batch
from biotf.data.labels import label_text
from biotf.data.long_policy import encode_for_task
from biotf.data.readers import ReaderOptions, read_records
from biotf.errors import ConfigError
from biotf.model.tasks import TaskModel
from biotf.tokenizers.base import PolicyStats, Tokenizer


@dataclass
class PredictionSummary:
    """What `predict_file` did: rows written of records read, and what the long-sequence policy changed."""

    rows: int
    records: int
    task: str
    counts: Counter = field(default_factory=Counter)  # records cut or dropped by the run's long_policy
    policies: PolicyStats = field(default_factory=PolicyStats)  # what the reader's and tokenizer's policies changed


@torch.no_grad()
def predict(model: TaskModel, tokenizer: Tokenizer, batch: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(predictions, scores) of a batch of encoded records: class ids and softmax probabilities (classification,
    token: per position), or values and values (regression)."""
    if tokenizer.pad_id is None:
        raise ConfigError("tokenizer", tokenizer.kind, reason="batched prediction needs a tokenizer with a pad token")
    ids, attention = (torch.from_numpy(a) for a in pad_batch(batch, tokenizer.pad_id))
    out = model(ids, attention, content_mask(ids, attention, tokenizer))
    if model.task == "regression":
        return out.predictions.numpy(), out.predictions.numpy()
    return out.predictions.numpy(), torch.softmax(out.logits.float(), -1).numpy()


def prediction_row(record: str, ids: np.ndarray, predicted: np.ndarray, score: np.ndarray, info: TaskInfo,
                   tokenizer: Tokenizer) -> list[str]:
    """One output row: id, the prediction as text (`label_text`, the form of the training labels) and, for
    classification, each class's probability."""
    if info.task == "token":  # per position over the padded width: keep the record's content positions
        predicted = predicted[:len(ids)][~np.isin(ids, list(tokenizer.special_ids))]
    row = [record, label_text(predicted, info.classes, info.task)]
    return row + [f"{p:.6f}" for p in score] if info.task == "classification" else row


def predict_file(model_source: str | Path, input_path: str | Path, output: str | Path,
                 options: ReaderOptions | None = None, batch_size: int = 32,
                 tokenizer_options: Mapping[str, Any] | None = None) -> PredictionSummary:
    """Predict every record of `input_path` with the fine-tuned model `model_source` and write `output` atomically
    (the caller has checked the output path: `biotf.export.outputs.check_output`); `tokenizer_options` change
    policies of the model's tokenizer (`load_pretrained`). An error about a record names `input_path`."""
    if batch_size < 1:
        raise ConfigError("--batch-size", batch_size, "an integer >= 1")
    model, tokenizer, info = load_task_model(model_source, tokenizer_options)
    header = ["id", "prediction"] + ([f"p_{c}" for c in info.classes] if info.task == "classification" else [])
    summary = PredictionSummary(rows=0, records=0, task=info.task)
    rows: list[list[str]] = []
    batch: list[tuple[str, np.ndarray]] = []

    def flush() -> None:
        predictions, scores = predict(model, tokenizer, [ids for _, ids in batch])
        rows.extend(prediction_row(record, ids, predicted, score, info, tokenizer)
                    for (record, ids), predicted, score in zip(batch, predictions, scores))
        batch.clear()

    for record in read_records(input_path, options or ReaderOptions(), summary.policies):
        summary.records += 1
        ids = encode_for_task(tokenizer, record.sequence, record.id, info.max_length, info.long_policy,
                              summary.counts, summary.policies, input_path)
        if ids is not None:
            batch.append((record.id, ids))
        if len(batch) == batch_size:
            flush()
    if batch:
        flush()
    summary.rows = len(rows)
    delimiter = "," if Path(output).suffix.lower() == ".csv" else "\t"

    def write(path: Path) -> None:
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle, delimiter=delimiter, lineterminator="\n")
            writer.writerow(header)
            writer.writerows(rows)

    atomic_write(output, write)
    return summary
