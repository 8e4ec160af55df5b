"""The LightningModule: `biotf.model.Transformer` plus its optimizer, schedule, metrics and checkpoint payload.

Metrics (CSV logger columns, progress bar): train/loss, train/ppl, train/acc (masked-token
accuracy for MLM, next-token accuracy for CLM: the target has the largest logit), train/tokens_per_s
(real, non-padding tokens over wall time between batch ends, all ranks), train/lr; val/loss, val/ppl,
val/acc computed exactly over the whole validation split (sums of per-token losses, not a mean of
batch means).

Every checkpoint carries `checkpoint["biotf"]` (see `biotf.checkpoint.format`): the model config,
the tokenizer's saved JSON and its fingerprint. Resuming with a different tokenizer is refused,
and the torch RNG state is saved too so that dropout after a resume repeats the uninterrupted run.
"""

from __future__ import annotations

import math
import time
from typing import Any

import lightning as L
import torch

from biotf.checkpoint import CHECKPOINT_KEY, checkpoint_payload, ensure_same_tokenizer, payload_fingerprint
from biotf.errors import BiotfError
from biotf.model import Transformer, TransformerConfig
from biotf.model.loss import language_model_loss
from biotf.tokenizers.base import Tokenizer
from biotf.training.callbacks import (PROGRESS_KEY, RunControl, TrainingTime, agree_on_requests, restore_rng_state,
                                     save_rng_state)
from biotf.training.train_config import OptimConfig
from biotf.training.optim import build_optimizer

SKIPPED_KEY = "biotf_nonfinite_skipped"


class LanguageModelTask(L.LightningModule):
    """Trains a Transformer with masked-LM (bidirectional config) or causal-LM (causal config) loss."""

    def __init__(self, model_config: TransformerConfig, tokenizer: Tokenizer, optim: OptimConfig, total_steps: int,
                 compile: bool = False, train_config: dict[str, Any] | None = None, nonfinite: str = "stop",
                 control: RunControl | None = None, fused_loss: bool = True):
        super().__init__()
        self.model = Transformer(model_config)
        self.tokenizer, self.optim_config, self.total_steps = tokenizer, optim, total_steps
        self.train_config = train_config
        if compile:  # each block in place (state_dict keys stay): the plain and the fused loss both run them
            for block in self.model.blocks:
                block.compile()
        self.nonfinite, self.control, self.fused_loss = nonfinite, control, fused_loss
        self.tokens_seen = 0
        self._batch_tokens = 0
        self.training_time = TrainingTime()
        self.nonfinite_skipped = 0  # batches whose loss was NaN/inf, under nonfinite="skip"
        self._last_batch_end: float | None = None
        self._val_sums: torch.Tensor | None = None

    # --- steps -----------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, segment_ids: torch.Tensor | None = None):
        return language_model_loss(self.model, input_ids, labels, attention_mask, fused=self.fused_loss,
                                   segment_ids=segment_ids)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor | None:
        out = self(batch["input_ids"], batch.get("attention_mask"), batch["labels"], batch.get("segment_ids"))
        loss = out.loss
        if not agree_on_requests(self, self.control, bool(torch.isfinite(loss.detach()))):
            return self._nonfinite(loss, batch_idx)
        with torch.no_grad():
            self.log("train/loss", loss, prog_bar=True)
            self.log("train/ppl", torch.exp(loss.detach().float()))
            self.log("train/acc", out.correct / out.scored.clamp(min=1))
            self.log("train/lr", self.optimizers().param_groups[0]["lr"])
        return loss

    def _nonfinite(self, loss: torch.Tensor, batch_idx: int) -> None:
        """The `trainer.nonfinite` policy for a NaN/inf loss: stop with an error, or skip the batch (counted).

        Returning None makes Lightning skip backward and the optimizer step for this batch."""
        if self.nonfinite == "stop":
            raise BiotfError(f"non-finite training loss {float(loss.detach()):g} at step {self.global_step + 1} (batch "
                             f"{batch_idx} of epoch {self.current_epoch}); stopped, checkpoints/last.ckpt keeps the "
                             "last good weights (set trainer.nonfinite=skip to skip such batches, counted)")
        self.nonfinite_skipped += 1
        self.log("train/nonfinite_skipped", float(self.nonfinite_skipped))
        return None

    def on_train_start(self) -> None:
        self.training_time.start()

    def train_seconds(self) -> float:
        """Wall time spent in training so far, over all the processes that resumed this run."""
        return self.training_time.seconds()

    def on_train_batch_start(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        # Counted as the batch starts, so that a checkpoint written as it ends (callbacks run first) counts it.
        mask = batch.get("attention_mask")
        if mask is None and "segment_ids" in batch:  # packed rows: padding is segment 0
            mask = batch["segment_ids"] != 0
        self._batch_tokens = (int(mask.sum()) if mask is not None else batch["input_ids"].numel()) \
            * self.trainer.world_size
        self.tokens_seen += self._batch_tokens

    def on_train_batch_end(self, outputs: Any, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        now = time.perf_counter()
        if self._last_batch_end is not None:
            rate = self._batch_tokens / max(now - self._last_batch_end, 1e-9)
            self.log("train/tokens_per_s", rate, prog_bar=True)
        self._last_batch_end = now

    def on_validation_epoch_start(self) -> None:
        self._val_sums = torch.zeros(3, dtype=torch.float64, device=self.device)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        out = self(batch["input_ids"], batch.get("attention_mask"), batch["labels"], batch.get("segment_ids"))
        self._val_sums += torch.stack([out.loss.double() * out.scored, out.scored.double(), out.correct.double()])

    def on_validation_epoch_end(self) -> None:
        loss_sum, scored, correct = self._val_sums.tolist()
        loss = loss_sum / max(scored, 1.0)
        # Every rank scored the same full validation split, so these values agree across ranks.
        self.log("val/loss", loss, prog_bar=True)
        self.log("val/ppl", math.exp(min(loss, 50.0)))
        self.log("val/acc", correct / max(scored, 1.0))
        self._last_batch_end = None  # validation time is not training throughput

    def configure_model(self) -> None:
        """Under `trainer.strategy=fsdp` (`biotf.training.sharding`), each block sharded, then this module."""
        shard = getattr(self.trainer.strategy, "shard", None)
        if shard is not None:
            shard(self, list(self.model.blocks))

    # --- optimisation ----------------------------------------------------------------------
    def configure_optimizers(self) -> dict[str, Any]:
        optimizer, scheduler = build_optimizer(self.model, self.optim_config, self.total_steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    # --- checkpoints -----------------------------------------------------------------------
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint[CHECKPOINT_KEY] = checkpoint_payload(self.model.config, self.tokenizer, self.train_config)
        save_rng_state(checkpoint, self)
        checkpoint[SKIPPED_KEY] = self.nonfinite_skipped
        checkpoint[PROGRESS_KEY] = {"tokens_seen": self.tokens_seen, "train_seconds": self.train_seconds()}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        ensure_same_tokenizer(payload_fingerprint(checkpoint.get(CHECKPOINT_KEY), "the resumed checkpoint"),
                              self.tokenizer, "the resumed checkpoint", candidate="the configured tokenizer")
        self.nonfinite_skipped = checkpoint.get(SKIPPED_KEY, 0)
        progress = checkpoint.get(PROGRESS_KEY, {})
        self.tokens_seen = progress.get("tokens_seen", 0)
        self.training_time.before = progress.get("train_seconds", 0.0)
        restore_rng_state(checkpoint, self)

