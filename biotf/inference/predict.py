"""A fine-tuned model's predictions for every record of a file (`biotf predict`), one row per record.

Columns: id, prediction (the class name, the value in the label's unit, or one label character per residue), and
for classification one probability column per class (p_<class>); tab-separated unless the output ends in .csv.
Records are encoded as in training (the run's max_length and long_policy, `encode_for_task`), or to a `max_length`
given here (past the model's max_seq_len where its positions extend: `reading_length`; a whole genome in one pass);
records cut or dropped by that policy are counted. Under torchrun `PredictRun` predicts in parts (`biotf.data.sharded`), merged by rank 0.
With `packing` the records of a batch share rows, each alone in its segment and pooled alone (`TaskModel`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from biotf.checkpoint.loading import LoadedModel, as_loaded, model_identity
from biotf.checkpoint.task_model import TaskInfo
from biotf.data.collators import content_mask
from biotf.data.labels import label_text
from biotf.data.long_policy import encode_for_task
from biotf.data.packing import FilledRows, check_packable, fill_rows, inference_rows
from biotf.io.readers import ReaderOptions, Record, read_records
from biotf.io.tables import write_rows
from biotf.errors import CheckpointError, ConfigError
from biotf.model.positions import reading_length
from biotf.model.heads import TaskModel
from biotf.progress import Progress, reporting
from biotf.tokenizers.base import PolicyStats, Tokenizer
from biotf.naming import parameter

PART_ROWS = "rows.jsonl"  # a sharded run's part: its rows, one JSON array of strings a line


@dataclass
class PredictionSummary:
    """What `predict_file` did: rows written of records read, and what the long-sequence policy changed."""

    rows: int
    records: int
    task: str
    counts: Counter = field(default_factory=Counter)  # records cut or dropped by the run's long_policy
    policies: PolicyStats = field(default_factory=PolicyStats)  # what the reader's and tokenizer's policies changed

    def changed(self) -> str:
        """What the policies changed, as `biotf predict` says it: long-policy counts, then each reader and tokenizer
        policy count by name ("3 truncated, unknown=2"), or "nothing changed"."""
        changed = [f"{n} {why}" for why, n in self.counts.items()]
        changed += [f"{key}={n}" for key, n in sorted(self.policies.items())]
        return ", ".join(changed) or "nothing changed"


@torch.no_grad()
def predict(model: TaskModel, tokenizer: Tokenizer, batch: list[np.ndarray],
            packing: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(predictions, scores) of a batch of encoded records, in its order: class ids and softmax probabilities
    (classification, token: per position, the longest record's width), or values and values (regression). Rows are
    formed as every inference command forms them (`biotf.data.packing.inference_rows`); with `packing` several records
    share a row, each alone in its segment (and pooled alone): the same outputs, fewer pad tokens."""
    if tokenizer.pad_id is None:
        raise ConfigError("tokenizer", tokenizer.kind, reason="batched prediction needs a tokenizer with a pad token")
    rows = inference_rows([len(ids) for ids in batch], packing)
    filled = fill_rows([[batch[i] for i in row] for row in rows], tokenizer.pad_id, packing)
    ids, inputs = torch.from_numpy(filled.ids), filled.inputs("cpu")
    mask = content_mask(ids, torch.from_numpy(filled.segments != 0), tokenizer)
    out = model(ids, inputs.get("attention_mask"), mask, segment_ids=inputs.get("segment_ids"))
    predictions = out.predictions  # values in the model's dtype (bf16 with --precision bf16), or class ids
    predictions = (predictions.float() if predictions.is_floating_point() else predictions).numpy()
    scores = predictions if model.task == "regression" else torch.softmax(out.logits.float(), -1).numpy()
    order, per_position = [index for row in rows for index in row], model.task == "token"
    return (_in_batch_order(predictions, filled, order, per_position),
            _in_batch_order(scores, filled, order, per_position))


def _in_batch_order(values: np.ndarray, filled: FilledRows, order: list[int], per_position: bool) -> np.ndarray:
    """A model output of the filled rows, one entry per record in batch order: per position, each record's span
    (right-padded with zeros to the longest record); pooled (one per record in row order), reordered."""
    if not per_position:
        return values[np.argsort(order)]
    out = np.zeros((len(order), max(length for _, _, length in filled.spans), *values.shape[2:]), values.dtype)
    for index, (row, start, length) in zip(order, filled.spans):
        out[index, :length] = values[row, start:start + length]
    return out


def prediction_row(record: str, ids: np.ndarray, predicted: np.ndarray, score: np.ndarray, info: TaskInfo,
                   tokenizer: Tokenizer) -> list[str]:
    """One output row: id, the prediction as text (`label_text`, the form of the training labels) and, for
    classification, each class's probability."""
    if info.task == "token":  # per position over the padded width: keep the record's content positions
        predicted = predicted[:len(ids)][~np.isin(ids, list(tokenizer.special_ids))]
    row = [record, label_text(predicted, info.classes, info.task)]
    return row + [f"{p:.6f}" for p in score] if info.task == "classification" else row


def loaded_task_model(model: str | Path | LoadedModel,
                      tokenizer_options: Mapping[str, Any] | None = None) -> LoadedModel:
    """A fine-tuned model with its task head: `model` itself, or loaded from its source (`as_loaded`); a model
    without a head is refused."""
    loaded = as_loaded(model, model.network.device if isinstance(model, LoadedModel) else None, tokenizer_options)
    if loaded.task is None or loaded.task_info is None:
        raise CheckpointError(f"{loaded.source or 'this model'} is not a fine-tuned model (it has no task head); "
                              "train one with `python train.py experiment=finetune ...`")
    return loaded


def prediction_header(info: TaskInfo) -> list[str]:
    """The output's columns: id, prediction, and one probability column per class for classification."""
    classes = info.classes if info.task == "classification" else []
    return ["id", "prediction"] + [f"p_{c}" for c in classes]


def record_length(model: TaskModel, info: TaskInfo, max_length: int | None) -> int:
    """Tokens a record is encoded to: the run's max_length, or `max_length` (`reading_length` checks it against the
    trunk's positions)."""
    return info.max_length if max_length is None else reading_length(model.trunk.config, max_length)


def prediction_rows(model: TaskModel, tokenizer: Tokenizer, info: TaskInfo, records: Iterable[Record],
                    summary: PredictionSummary, batch_size: int = 32, packing: bool = False,
                    source: str | Path | None = None, progress: Progress | None = None,
                    max_length: int | None = None) -> list[list[str]]:
    """One row (`prediction_header`'s columns) per record the model's long_policy keeps, in order, `batch_size`
    records a batch, each encoded to `record_length(max_length)` tokens; counts into `summary` (and `progress`:
    records predicted). `source` names the file in an error about a record."""
    length = record_length(model, info, max_length)
    rows: list[list[str]] = []
    batch: list[tuple[str, np.ndarray]] = []

    def flush() -> None:
        predictions, scores = predict(model, tokenizer, [ids for _, ids in batch], packing)
        rows.extend(prediction_row(record, ids, predicted, score, info, tokenizer)
                    for (record, ids), predicted, score in zip(batch, predictions, scores))
        if progress is not None:
            progress.update(len(batch))
        batch.clear()

    for record in records:
        summary.records += 1
        ids = encode_for_task(tokenizer, record.sequence, record.id, length, info.long_policy,
                              summary.counts, summary.policies, source)
        if ids is not None:
            batch.append((record.id, ids))
        if len(batch) == batch_size:
            flush()
    if batch:
        flush()
    summary.rows += len(rows)
    return rows


class PredictRun:
    """A fine-tuned model's predictions for records: the whole file (`predict_file`), or the parts of a sharded run
    and their merge (`biotf.data.sharded.PartWork`: a part's rows are JSON lines of the output's text fields)."""

    def __init__(self, model: str | Path | LoadedModel, output: str | Path, batch_size: int = 32,
                 tokenizer_options: Mapping[str, Any] | None = None, input_path: str | Path | None = None,
                 packing: bool = False, progress: bool = False, max_length: int | None = None):
        if batch_size < 1:
            raise ConfigError(parameter("batch_size"), batch_size, "an integer >= 1")
        check_packable(packing)
        self.output, self.batch_size, self.input_path, self.packing = output, batch_size, input_path, packing
        self.progress = progress  # records predicted, on stderr (`biotf.progress`)
        loaded = loaded_task_model(model, tokenizer_options)
        self.model, self.tokenizer, self.info, self.loaded = loaded.task, loaded.tokenizer, loaded.task_info, loaded
        self.tokenizer_options = loaded.tokenizer_options
        check_packable(packing, self.model.trunk.config)
        self.header = prediction_header(self.info)
        self.max_length = max_length  # checked by `prediction_rows` (`record_length`)

    def rows(self, records: Iterable[Record], summary: PredictionSummary) -> list[list[str]]:
        """One row per record the run's long_policy keeps, in order (`prediction_rows`); counts into `summary`."""
        with reporting(self.progress, f"predicting {Path(self.input_path or '').name}", "records",
                       self.model.trunk) as shown:
            return prediction_rows(self.model, self.tokenizer, self.info, records, summary, self.batch_size,
                                   self.packing, self.input_path, shown, self.max_length)

    def write(self, rows: Iterable[list[str]]) -> None:
        """The output file (tab-separated unless its name ends in .csv), atomically."""
        write_rows(self.output, self.header, rows, "," if Path(self.output).suffix.lower() == ".csv" else "\t")

    # --- biotf.data.sharded.PartWork -----------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        return {"command": "predict", **model_identity(self.model, self.loaded),
                "tokenizer_fingerprint": self.tokenizer.fingerprint, "tokenizer_options": self.tokenizer_options,
                "packing": self.packing}

    def write_part(self, records: Iterator[Record], directory: Path) -> dict[str, Any]:
        summary = PredictionSummary(rows=0, records=0, task=self.info.task)
        rows = self.rows(records, summary)
        with open(directory / PART_ROWS, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        return {"rows": summary.rows, "records": summary.records, "counts": dict(summary.counts),
                "policies": dict(summary.policies)}

    def merge(self, parts: list[Path], output: Path, counts: dict[str, Any]) -> None:
        def rows() -> Iterator[list[str]]:
            for part in parts:
                with open(part / PART_ROWS, encoding="utf-8") as handle:
                    yield from (json.loads(line) for line in handle)

        self.write(rows())

    def summary(self, counts: Mapping[str, Any]) -> PredictionSummary:
        """The summary of counts summed over a sharded run's parts."""
        return PredictionSummary(counts["rows"], counts["records"], self.info.task, Counter(counts.get("counts", {})),
                                 PolicyStats(counts.get("policies", {})))


def predict_file(model: str | Path | LoadedModel, input_path: str | Path, output: str | Path,
                 options: ReaderOptions | None = None, batch_size: int = 32,
                 tokenizer_options: Mapping[str, Any] | None = None, packing: bool = False,
                 progress: bool = False, max_length: int | None = None) -> PredictionSummary:
    """Predict every record of `input_path` with the fine-tuned model `model_source` and write `output` atomically
    (the caller has checked the output path: `biotf.io.outputs.check_output`); `tokenizer_options` change
    policies of the model's tokenizer (`as_loaded`); `packing`: the records of a batch share rows (`predict`);
    `max_length`: tokens a record is encoded to (`record_length`). An error about a record names `input_path`."""
    run = PredictRun(model, output, batch_size, tokenizer_options, input_path, packing, progress, max_length)
    summary = PredictionSummary(rows=0, records=0, task=run.info.task)
    run.write(run.rows(read_records(input_path, options or ReaderOptions(), summary.policies), summary))
    return summary
