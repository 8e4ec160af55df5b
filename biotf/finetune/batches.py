"""Batches of labelled records (`LabelledSet`) for a task model: padded ids, masks and labels in the task's form.

The training loader is a language-model run's (`ResumableDataLoader` over a `LengthGroupedBatchSampler`): its
batches are a function of (seed, epoch), and a resumed run continues mid-epoch with the batches it had not seen.
"""

from __future__ import annotations

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader

from biotf.data import LengthGroupedBatchSampler
from biotf.data.collators import content_mask, pad_batch
from biotf.conventions import IGNORE_INDEX
from biotf.tokenizers.base import Tokenizer
from biotf.training.datamodule import ResumableDataLoader
from biotf.finetune.features import TrunkFeatures
from biotf.finetune.labelled import LabelledSet


class RowDataset(torch.utils.data.Dataset):
    """Items are row indices of a `LabelledSet`: the collator reads the rows' ids and labels."""

    def __init__(self, rows: np.ndarray):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, item: int) -> int:
        return int(self.rows[item])


def batch_labels(data: LabelledSet, rows: list[int], task: str, width: int) -> torch.Tensor:
    """The rows' labels in the task's form: class ids, (B, 1) values, or (B, width) token classes (-100: none)."""
    labels = [data.labels[r] for r in rows]
    if task == "token":
        target = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)
        for row, label in enumerate(labels):
            target[row, :len(label)] = torch.from_numpy(label)
        return target
    if task == "regression":
        return torch.tensor(labels, dtype=torch.float32)[:, None]
    return torch.tensor(labels, dtype=torch.long)


class TaskCollator:
    """Row indices -> padded input_ids, attention_mask, content_mask and labels (class ids, values or per token)."""

    def __init__(self, data: LabelledSet, tokenizer: Tokenizer, task: str):
        self.data, self.tokenizer, self.task = data, tokenizer, task

    def __call__(self, rows: list[int]) -> dict[str, torch.Tensor]:
        ids, attention = (torch.from_numpy(a) for a in pad_batch([self.data.token_ids[r] for r in rows],
                                                                  self.tokenizer.pad_id))
        return {"input_ids": ids, "attention_mask": attention,
                "content_mask": content_mask(ids, attention, self.tokenizer),
                "labels": batch_labels(self.data, rows, self.task, ids.shape[1]), "rows": torch.tensor(rows)}


class FeatureCollator:
    """Row indices -> a frozen trunk's cached features (B, D), or (B, T, D) zero-padded for a token task, and the
    labels: what the head alone trains on (`TaskModel.from_features`)."""

    def __init__(self, data: LabelledSet, features: TrunkFeatures, task: str):
        self.data, self.features, self.task = data, features, task

    def __call__(self, rows: list[int]) -> dict[str, torch.Tensor]:
        parts = [torch.from_numpy(np.array(self.features[r])) for r in rows]
        if self.features.per_token:
            features = torch.nn.utils.rnn.pad_sequence(parts, batch_first=True)
        else:
            features = torch.cat(parts)
        return {"features": features, "labels": batch_labels(self.data, rows, self.task, features.shape[1]),
                "rows": torch.tensor(rows)}


def task_loader(data: LabelledSet, rows: np.ndarray, collate: TaskCollator, batch_size: int,
                trainer: L.Trainer | None, seed: int) -> DataLoader:
    """The training loader (`trainer` given): shuffled batches that are a function of (seed, epoch) and that a resume
    continues mid-epoch, as a language-model run's (`ResumableDataLoader`), every rank of a distributed run taking
    its own; otherwise the rows in order (every rank all of them)."""
    generator = torch.Generator().manual_seed(seed)
    dataset = RowDataset(rows)
    if trainer is None:
        return DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=collate, generator=generator)
    # group_batches=1: plain random batches (no length grouping), each sorted by length.
    sampler = LengthGroupedBatchSampler(np.array([len(data.token_ids[r]) for r in rows]), batch_size, shuffle=True,
                                        seed=seed, group_batches=1, num_replicas=trainer.world_size,
                                        rank=trainer.global_rank)
    return ResumableDataLoader(dataset, batch_sampler=sampler, collate_fn=collate, generator=generator,
                               epoch_fn=lambda: trainer.current_epoch)
