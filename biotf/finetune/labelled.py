"""Labelled records for fine-tuning: each record's label read from data.label_column, in the task's form.

Classification takes the distinct values as class names (sorted); regression parses finite numbers (a `nan`, `inf`
or `1e999` label is refused: one such record would make every prediction NaN); token takes one label character per
residue, so it needs a tokenizer with one token per residue (character-level protein / DNA), checked record by
record. Two different records with one id are refused (split.tsv and the predictions name records by id); a
record repeated whole (UCI splice has 12) stays: its copies share every split group, so they land on one side.
Records are never dropped or cut silently: what happened to records, by reason, is counted in `LabelledSet.counts`
(unlabelled, over max_length and dropped or cropped by data.long_policy), and what the reader's and the
tokenizer's policies changed (`unknown_to_unk`, `whitespace_stripped`, ...) in `LabelledSet.policies`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from biotf.io.readers import ReaderOptions, Record, read_records
from biotf.data.long_policy import CROPPED, encode_for_task
from biotf.errors import InputError
from biotf.conventions import IGNORE_INDEX
from biotf.tokenizers.base import PolicyStats, Tokenizer
from biotf.training.train_config import TrainConfig


@dataclass
class LabelledSet:
    """Encoded labelled records: `labels[i]` is a class id, a float, or an array over `ids[i]` (token task)."""

    ids: list[str]
    sequences: list[str]
    token_ids: list[np.ndarray]
    labels: list[Any]
    groups: list[str] | None
    classes: list[str] | None
    counts: Counter  # records left out or cut, by reason
    policies: PolicyStats = field(default_factory=PolicyStats)  # what the reader's and tokenizer's policies changed

    @property
    def dropped(self) -> dict[str, int]:
        """Records left out, by reason."""
        return {why: n for why, n in self.counts.items() if why != CROPPED}

    @property
    def cropped(self) -> int:
        """Records kept but cut to their first max_length tokens (data.long_policy=crop)."""
        return self.counts[CROPPED]

    def without(self, positions: Sequence[int], reason: str) -> LabelledSet:
        """This set without the records at `positions`, counted under `reason` (a step could not use them)."""
        keep = np.setdiff1d(np.arange(len(self.ids)), positions)

        def kept(values: list) -> list:
            return [values[i] for i in keep]

        return replace(self, ids=kept(self.ids), sequences=kept(self.sequences), token_ids=kept(self.token_ids),
                       labels=kept(self.labels), groups=kept(self.groups) if self.groups is not None else None,
                       counts=self.counts + Counter({reason: len(positions)}))


def unique_columns(records: Sequence[Record]) -> list[str]:
    """The metadata columns whose values are non-empty and distinct in every record: ids a file already has."""
    names = records[0].metadata if records else {}
    return [name for name in names
            if all(r.metadata.get(name) not in (None, "") for r in records)
            and len({r.metadata.get(name) for r in records}) == len(records)]


def _label_values(config: TrainConfig, stats: PolicyStats | None = None) -> tuple[list, list[str], list[str | None]]:
    """(records, raw labels, group names) of the input, labels parsed with data.label_pattern; what the reader's
    policies changed is counted in `stats`."""
    from biotf.data.labels import parse_labels

    data = config.data
    records = list(read_records(data.path, ReaderOptions(format=data.format, column=data.column,
                                                         id_column=data.id_column), stats))
    if not records:
        raise InputError(f"data.path: {data.path} holds no records")
    first: dict[str, int] = {}
    for position, record in enumerate(records, 1):
        earlier = first.setdefault(record.id, position)
        if earlier != position and (records[earlier - 1].sequence, records[earlier - 1].metadata) != \
                (record.sequence, record.metadata):
            unique = unique_columns(records)
            fix = (f" (data.id_column=<column>; columns with a distinct value in every record: {', '.join(unique)})"
                   if unique else "")
            raise InputError(f"{data.path}: records {earlier} and {position} have the same id {record.id!r} but "
                             f"differ; split.tsv and the predictions name records by id: give them distinct ids{fix}")
    column, group_column = data.label_column, config.finetune.split.group_column
    for key, name in (("data.label_column", column), ("finetune.split.group_column", group_column)):
        if name is not None and name != "id" and name not in records[0].metadata:
            raise InputError(f"{key}: column {name!r} not found in {data.path} "
                             f"(columns: {', '.join(['id', *records[0].metadata])})")
    raw = np.array([r.id if column == "id" else r.metadata.get(column, "") for r in records], dtype=str)
    raw = parse_labels([r.id for r in records], raw, data.label_pattern, column, key="data.label_pattern")
    groups = [r.metadata.get(group_column) if group_column else None for r in records]
    return records, [str(v).strip() for v in raw], groups


def read_labelled(config: TrainConfig, tokenizer: Tokenizer, max_length: int) -> LabelledSet:
    """Every labelled record, encoded to at most `max_length` tokens (data.max_length, or the model's when that is
    null), with its label in the task's form (see the module docstring)."""
    task, data = config.task, config.data
    policies = PolicyStats()
    records, raw, groups = _label_values(config, policies)
    counts: Counter = Counter()
    classes = None
    if task == "classification":
        classes = sorted({v for v in raw if v})
        if len(classes) < 2:
            raise InputError(f"data.label_column {data.label_column!r}: {len(classes)} distinct label(s); "
                             "classification needs at least 2")
    elif task == "token":
        classes = sorted({c for v in raw for c in v})
    index = {name: i for i, name in enumerate(classes or [])}
    kept = LabelledSet([], [], [], [], [] if config.finetune.split.method == "group" else None, classes, counts,
                       policies)
    for record, value, group in zip(records, raw, groups):
        if not value:
            counts["unlabelled"] += 1
            continue
        if config.finetune.split.method == "group" and not group:
            raise InputError(f"record {record.id!r}: no value in group column {config.finetune.split.group_column!r}")
        ids = encode_for_task(tokenizer, record.sequence, record.id, max_length, data.long_policy, counts,
                              policies, data.path)
        if ids is None:
            continue
        if task == "classification":
            label: Any = index[value]
        elif task == "regression":
            label = _regression_label(value, record.id, data.path)
        else:
            label = _token_labels(record.id, record.sequence, value, ids, tokenizer, index)
        kept.ids.append(record.id)
        kept.sequences.append(record.sequence)
        kept.token_ids.append(ids)
        kept.labels.append(label)
        if kept.groups is not None:
            kept.groups.append(group)
    if task == "regression" and len(set(kept.labels)) < 2:
        raise InputError("task=regression: the labels do not vary")
    return kept


def _regression_label(value: str, record: str, path: str) -> float:
    """A regression label as a finite float; anything else is refused naming the file, the record and the value."""
    try:
        label = float(value)
    except ValueError:
        raise InputError(f"{path}: record {record!r}: label {value!r} is not a number (task=regression)") from None
    if not math.isfinite(label):
        raise InputError(f"{path}: record {record!r}: label {value!r} is not a finite number (task=regression); "
                         "correct or remove the record")
    return label


def _token_labels(record: str, sequence: str, value: str, ids: np.ndarray, tokenizer: Tokenizer,
                  index: dict[str, int]) -> np.ndarray:
    """Per-token class ids over `ids` (-100 on special tokens) from one label character per residue."""
    if len(value) != len(sequence):
        raise InputError(f"record {record!r}: {len(value)} token labels for a sequence of {len(sequence)} residues "
                         "(task=token needs one label character per residue)")
    content = np.flatnonzero(~np.isin(ids, list(tokenizer.special_ids)))
    whole = len(tokenizer.encode(sequence, add_special_tokens=False, record=record))
    if whole != len(sequence):
        raise InputError(f"record {record!r}: the {tokenizer.scheme} tokenizer makes {whole} tokens of {len(sequence)} "
                         "residues; task=token needs one token per residue (a character-level tokenizer)")
    labels = np.full(len(ids), IGNORE_INDEX, np.int64)
    labels[content] = [index[c] for c in value[:len(content)]]  # a cut record keeps its first residues' labels
    return labels
