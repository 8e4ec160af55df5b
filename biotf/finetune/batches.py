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
from biotf.finetune.labelled import LabelledSet


class RowDataset(torch.utils.data.Dataset):
    """Items are row indices of a `LabelledSet`: the collator reads the rows' ids and labels."""

    def __init__(self, rows: np.ndarray):
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, item: int) -> int:
        return int(self.rows[item])


class TaskCollator:
    """Row indices -> padded input_ids, attention_mask, content_mask and labels (class ids, values or per token)."""

    def __init__(self, data: LabelledSet, tokenizer: Tokenizer, task: str):
        self.data, self.tokenizer, self.task = data, tokenizer, task

    def __call__(self, rows: list[int]) -> dict[str, torch.Tensor]:
        ids, attention = (torch.from_numpy(a) for a in pad_batch([self.data.token_ids[r] for r in rows],
                                                                  self.tokenizer.pad_id))
        labels = [self.data.labels[r] for r in rows]
        if self.task == "token":
            target = torch.full(ids.shape, IGNORE_INDEX, dtype=torch.long)
            for row, label in enumerate(labels):
                target[row, :len(label)] = torch.from_numpy(label)
        elif self.task == "regression":
            target = torch.tensor(labels, dtype=torch.float32)[:, None]
        else:
            target = torch.tensor(labels, dtype=torch.long)
        return {"input_ids": ids, "attention_mask": attention,
                "content_mask": content_mask(ids, attention, self.tokenizer), "labels": target,
                "rows": torch.tensor(rows)}


def task_loader(data: LabelledSet, rows: np.ndarray, collate: TaskCollator, batch_size: int,
                trainer: L.Trainer | None, seed: int) -> DataLoader:
    """The training loader (`trainer` given): shuffled batches that are a function of (seed, epoch) and that a resume
    continues mid-epoch, as a language-model run's (`ResumableDataLoader`); otherwise the rows in order."""
    generator = torch.Generator().manual_seed(seed)
    dataset = RowDataset(rows)
    if trainer is None:
        return DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=collate, generator=generator)
    # group_batches=1: plain random batches (no length grouping), each sorted by length.
    sampler = LengthGroupedBatchSampler(np.array([len(data.token_ids[r]) for r in rows]), batch_size, shuffle=True,
                                        seed=seed, group_batches=1)
    return ResumableDataLoader(dataset, batch_sampler=sampler, collate_fn=collate, generator=generator,
                               epoch_fn=lambda: trainer.current_epoch)
