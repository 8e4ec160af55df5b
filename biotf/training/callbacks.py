"""Checkpointing pieces: atomic checkpoint files and `last.ckpt` every n optimizer steps and at the end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from biotf.inference.loading import atomic_write


class AtomicCheckpointIO(TorchCheckpointIO):
    """torch.save into a hidden temporary file, then rename: a kill mid-write never leaves a torn checkpoint."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None) -> None:
        atomic_write(path, lambda temporary: torch.save(checkpoint, temporary))


class LastCheckpoint(L.Callback):
    """Writes `path` (checkpoints/last.ckpt) every `every_n_steps` optimizer steps and after the final step.

    Lightning's ModelCheckpoint saves on multiples of n only, so a run whose max_steps is not a
    multiple would end with a stale last.ckpt; this one always ends with the final weights.
    """

    def __init__(self, path: str | Path, every_n_steps: int):
        self.path, self.every_n_steps = Path(path), every_n_steps
        self._saved_step = -1

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        step = trainer.global_step
        # With gradient accumulation several batches end at the same step; save once, after it stepped.
        if step == 0 or step == self._saved_step:
            return
        if step % self.every_n_steps == 0 or step >= trainer.max_steps:
            trainer.save_checkpoint(self.path, weights_only=False)
            self._saved_step = step
