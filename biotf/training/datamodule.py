"""The Lightning DataModule: `biotf.data.PreparedData` turned into resumable, rank-aware loaders.

Data is prepared (read, tokenized, cached) before the Trainer starts, in `biotf.training.run`, so a
bad file stops the run before any model step and DDP worker processes find the cache built. Here
we only batch: length-grouped batches and 80/10/10 masking for MLM, shuffled packed blocks for CLM. `data.packing`
packs MLM rows here (`PackedBatchSampler` and the packing collator); CLM blocks come document-masked from the data
layer already (`PackedBlockDataset`), batched as the blocks without it.

Exact resume: every random choice in the data is a function of (seed, epoch, record), and the
training loader is a `ResumableDataLoader` that Lightning checkpoints (it implements `state_dict` /
`load_state_dict`), so a run resumed mid-epoch skips exactly the batches it had trained on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, default_collate

from biotf.data import LengthGroupedBatchSampler, MLMCollator, PreparedData
from biotf.data.packing import PackedBatchSampler
from biotf.training.train_config import DataConfig
from biotf.tokenizers.base import Tokenizer


class ResumableDataLoader(DataLoader):
    """A DataLoader that knows its epoch and how many batches of it were handed out.

    Each iteration first sets the epoch on the batch sampler and the dataset (before worker
    processes copy the dataset), then yields batches, skipping those a restored checkpoint had
    already consumed. Lightning's fetcher does not prefetch from sized loaders, so the count of
    handed-out batches equals the count of trained batches when a checkpoint is written.
    """

    def __init__(self, *args: Any, epoch_fn: Callable[[], int], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._epoch_fn = epoch_fn
        self._position = {"epoch": 0, "batches": 0}
        self._resume: dict[str, int] | None = None

    def __iter__(self) -> Iterator[Any]:
        epoch = self._epoch_fn()
        skip = 0
        if self._resume is not None and self._resume["epoch"] == epoch:
            skip = self._resume["batches"]
        self._resume = None
        self._position = {"epoch": epoch, "batches": skip}
        # Skipping happens on indices, before any loading or collation work.
        self.batch_sampler.set_epoch(epoch, start_batch=skip)
        if hasattr(self.dataset, "set_epoch"):
            self.dataset.set_epoch(epoch)
        for batch in super().__iter__():
            self._position["batches"] += 1
            yield batch

    def __len__(self) -> int:
        # The whole epoch, also while a resumed epoch skips its start: Lightning counts the restored
        # batches itself, and sizes the next epoch from len() before this loader's next __iter__ runs.
        return len(self.batch_sampler) + self.batch_sampler.start_batch

    def state_dict(self) -> dict[str, int]:
        return dict(self._position)

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._resume = {"epoch": int(state["epoch"]), "batches": int(state["batches"])}


class SequenceDataModule(L.LightningDataModule):
    """Loaders over prepared train/validation datasets for the MLM or CLM objective.

    Validation is not sharded across ranks: every rank scores the whole (small) validation split,
    so the reported validation loss is exact and identical everywhere, with no padding duplicates.
    It is built as training's is, but for MLM packing: MLM validation stays padded (the same loss, packed or not),
    CLM validation under `data.packing` is document-masked blocks too (a loss per record, not across records).
    """

    def __init__(self, prepared: PreparedData, tokenizer: Tokenizer, data: DataConfig, seed: int):
        super().__init__()
        self.prepared, self.tokenizer, self.data, self.seed = prepared, tokenizer, data, seed
        if prepared.objective == "mlm":
            self.collate = MLMCollator(tokenizer, mask_probability=data.mask_probability, seed=seed)
        else:
            self.collate = default_collate
        self.train_collate = self.collate
        self.packed_rows = data.packing and prepared.objective == "mlm"
        if self.packed_rows:
            self.train_collate = MLMCollator(tokenizer, mask_probability=data.mask_probability, seed=seed,
                                             pack_length=data.max_length)

    def _generator(self) -> torch.Generator:
        # Each DataLoader iterator draws a base seed; from its own generator it leaves the global torch
        # RNG (dropout) untouched, so the RNG state saved in a checkpoint is exactly what resumes.
        return torch.Generator().manual_seed(self.seed)

    def _lengths(self, dataset: Any) -> np.ndarray:
        # CLM blocks all have the same length; grouping then reduces to a seeded shuffle.
        if hasattr(dataset, "lengths"):
            return dataset.lengths
        return np.full(len(dataset), self.data.max_length)

    def train_dataloader(self) -> ResumableDataLoader:
        dataset = self.prepared.train
        trainer = self.trainer
        options = dict(shuffle=True, seed=self.seed, num_replicas=trainer.world_size if trainer else 1,
                       rank=trainer.global_rank if trainer else 0)
        if self.packed_rows:
            sampler = PackedBatchSampler(self._lengths(dataset), self.data.batch_size, self.data.max_length, **options)
        else:
            sampler = LengthGroupedBatchSampler(self._lengths(dataset), self.data.batch_size, **options)
        return ResumableDataLoader(dataset, batch_sampler=sampler, collate_fn=self.train_collate,
                                   num_workers=self.data.num_workers, persistent_workers=False,
                                   generator=self._generator(), epoch_fn=lambda: trainer.current_epoch if trainer else 0)

    def val_dataloader(self) -> DataLoader:
        dataset = self.prepared.validation
        sampler = LengthGroupedBatchSampler(self._lengths(dataset), self.data.batch_size, shuffle=False,
                                            seed=self.seed)
        return DataLoader(dataset, batch_sampler=sampler, collate_fn=self.collate, num_workers=self.data.num_workers,
                          generator=self._generator())
