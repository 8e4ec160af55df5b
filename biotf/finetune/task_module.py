"""The LightningModule of a fine-tuning run: a `TaskModel` (trunk + head) in its mode, its optimizer and metrics.

Validation computes the task's metrics over the whole split (`task_metrics.py`); checkpoints carry the RNG state and
training steps agree on SIGTERM and the wall-time clock (`callbacks`), as a language-model run's do. A non-finite
training or validation loss stops the run with a `NonFiniteLoss` error: nothing is exported from weights that
have gone NaN (fine-tuning has no `trainer.nonfinite=skip`; `check_finetune` refuses it).
"""

from __future__ import annotations

import warnings
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader

from biotf.conventions import IGNORE_INDEX
from biotf.errors import BiotfError
from biotf.model.heads import TaskModel, TaskOutput
from biotf.training.callbacks import (PROGRESS_KEY, RunControl, TrainingTime, agree_on_requests, restore_rng_state,
                                     save_rng_state)
from biotf.training.train_config import TrainConfig
from biotf.finetune.task_metrics import task_metrics
from biotf.model.modes import Mode
from biotf.training.optim import build_optimizer, parameter_groups

# Every rank computes the validation metrics over the whole split, so they agree without a reduction; and the
# outputs of this module's forward (the FSDP2 root's) are read, never changed in place.
warnings.filterwarnings("ignore", message=r"It is recommended to use `self.log\('val/.*sync_dist=True")
warnings.filterwarnings("ignore", message=r"FSDP2-wrapped module \(FSDPTaskModule\) returned a view tensor")


class NonFiniteLoss(BiotfError):
    """A fine-tuning loss that became NaN or infinite: the run stops before its export."""

    def __init__(self, which: str, value: float, step: int):
        super().__init__(f"non-finite {which} loss {value:g} at step {step}; stopped, nothing exported (lower "
                         "optim.lr / finetune.trunk_lr, or check the inputs)")


class TaskModule(L.LightningModule):
    """Trains a `TaskModel`; validation computes the task's metrics over the whole split (`task_metrics.py`)."""

    def __init__(self, model: TaskModel, config: TrainConfig, mode: Mode, total_steps: int, n_classes: int,
                 control: RunControl | None = None):
        super().__init__()
        self.model, self.config, self.total_steps, self.n_classes = model, config, total_steps, n_classes
        self.mode = mode
        self.control, self.training_time = control, TrainingTime()
        self._outputs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if not self.mode.trains_trunk:
            self.model.trunk.eval()  # a frozen trunk computes the features of inference (no dropout)
        out = self(batch)
        # SIGTERM and the wall-time clock, as in a language-model run, and whether the loss is finite on every rank.
        if not agree_on_requests(self, self.control, bool(torch.isfinite(out.loss.detach()))):
            raise NonFiniteLoss("training", float(out.loss.detach()), self.global_step + 1)
        self.log("train/loss", out.loss.detach(), prog_bar=True, batch_size=len(batch["labels"]))
        self.log("train/lr", self.optimizers().param_groups[0]["lr"], batch_size=len(batch["labels"]))
        return out.loss

    def forward(self, batch: dict[str, torch.Tensor]) -> TaskOutput:
        """The model on a batch of tokens, or its head alone on a batch of cached trunk features. Steps call it as
        `self(batch)`: under FSDP2 this module is the root, whose forward gathers the head's parameters."""
        if "features" in batch:
            return self.model.from_features(batch["features"], batch["labels"])
        return self.model(batch["input_ids"], batch["attention_mask"], batch["content_mask"], batch["labels"])

    def on_validation_epoch_start(self) -> None:
        self._outputs = []

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        out = self(batch)
        weight = (batch["labels"] != IGNORE_INDEX).sum() if self.model.task == "token" else len(batch["labels"])
        self._outputs.append((out.loss.detach() * weight, torch.as_tensor(weight), out.predictions, batch["labels"]))

    def on_validation_epoch_end(self) -> None:
        metrics = self.collected_metrics()
        if not np.isfinite(metrics["loss"]):
            raise NonFiniteLoss("validation", metrics["loss"], self.global_step)
        for name, value in metrics.items():
            self.log(f"val/{name}", value, prog_bar=name == "loss")

    def collected_metrics(self) -> dict[str, float]:
        """Loss (weighted by labelled items) and task metrics over everything since the epoch started."""
        loss = float(sum(o[0] for o in self._outputs) / max(float(sum(o[1] for o in self._outputs)), 1.0))
        truth, predicted = self._flat([o[3] for o in self._outputs]), self._flat([o[2] for o in self._outputs])
        if self.model.task == "token":
            labelled = truth != IGNORE_INDEX
            truth, predicted = truth[labelled], predicted[labelled]
        return {"loss": loss, **task_metrics(self.model.task, truth, predicted, self.n_classes)}

    def _flat(self, tensors: list[torch.Tensor]) -> np.ndarray:
        if self.model.task == "token":  # batches differ in width
            return np.concatenate([t.cpu().numpy().ravel() for t in tensors])
        return torch.cat([t.cpu() for t in tensors]).numpy()

    def on_train_start(self) -> None:
        self.training_time.start()

    def configure_model(self) -> None:
        """Under `trainer.strategy=fsdp` (`biotf.training.sharding`), each trunk block sharded, then this module (the
        embedding, final norm and head with it)."""
        shard = getattr(self.trainer.strategy, "shard", None)
        if shard is not None:
            shard(self, list(self.model.trunk.blocks))

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        save_rng_state(checkpoint, self)  # head and trunk dropout after a resume repeat the uninterrupted run
        checkpoint[PROGRESS_KEY] = {"train_seconds": self.training_time.seconds()}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        restore_rng_state(checkpoint, self)
        self.training_time.before = checkpoint.get(PROGRESS_KEY, {}).get("train_seconds", 0.0)

    def configure_optimizers(self) -> dict[str, Any]:
        """optim.optimizer: the head at optim.lr, the trunk's trainable weights (all, or LoRA's) at finetune.trunk_lr
        (with muon, the trunk blocks' matrices through Muon)."""
        optim, trunk_lr = self.config.optim, self.config.finetune.trunk_lr or self.config.optim.lr
        groups = [dict(g, lr=optim.lr) for g in parameter_groups(self.model.head, optim.weight_decay)]
        groups += [dict(g, lr=trunk_lr) for g in parameter_groups(self.model.trunk, optim.weight_decay)]
        optimizer, scheduler = build_optimizer(self.model.trunk, optim, self.total_steps, groups)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def build_task_model(config: TrainConfig, trunk, n_outputs: int, mode: Mode) -> tuple[TaskModel, int]:
    """The TaskModel with the trunk prepared for `mode`; returns it and its trainable parameter count."""
    finetune = config.finetune
    trunk.train()
    trunk.gradient_checkpointing = config.trainer.gradient_checkpointing
    model = TaskModel(trunk, config.task, n_outputs, pool=finetune.pool, dropout=finetune.head_dropout,
                      resolution=finetune.resolution)
    mode.prepare(trunk)
    return model, sum(p.numel() for p in model.parameters() if p.requires_grad)


def evaluate(module: TaskModule, loader: DataLoader) -> tuple[dict[str, float], list[np.ndarray]]:
    """(metrics, one prediction per record in loader order) of the module's current weights on one split."""
    module.eval()
    module.on_validation_epoch_start()
    with torch.no_grad():
        for batch in loader:
            module.validation_step(batch, 0)
    predictions = [p for output in module._outputs for p in output[2].cpu().numpy()]
    return module.collected_metrics(), predictions
