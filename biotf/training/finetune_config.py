"""Fine-tuning configs: the `finetune` node of `TrainConfig` (mirrored by conf/experiment/finetune*.yaml).

A run fine-tunes when `task` is set (`classification | regression | token`): it starts from `init_from` (anything
`biotf.Model.load` reads), reads labels from `data.label_column`, splits the labelled records with
`finetune.split` and trains a task head (`biotf.model.heads`) with the trunk frozen, fully trained or adapted
with LoRA (`finetune.mode`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from biotf.data.splits import METHODS
from biotf.errors import ConfigError
from biotf.model.modes import MODES
from biotf.model.lora import LoRAConfig
from biotf.model.heads import RESOLUTIONS, SEQUENCE_POOLS
from biotf.tokenizers import POLICY_OPTIONS

MONITORS = ("loss", "accuracy", "f1", "mcc", "rmse", "spearman")


@dataclass
class SplitConfig:
    """How labelled records are split into train / validation / test (`biotf.data.splits`); whole groups go to
    one side. group_column: the input column naming the groups (method=group). identity: the sequence identity
    that links two records (method=identity); kmer: its k (null: automatic)."""

    method: str = "random"
    validation: float = 0.1
    test: float = 0.1
    group_column: Optional[str] = None
    identity: float = 0.6
    kmer: Optional[int] = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError("finetune.split.method", self.method, " | ".join(METHODS))
        for key in ("validation", "test"):
            if not 0.0 < getattr(self, key) < 1.0:
                raise ConfigError(f"finetune.split.{key}", getattr(self, key), "a fraction in (0, 1)")
        if self.validation + self.test >= 1.0:
            raise ConfigError("finetune.split.test", self.test, f"< {1 - self.validation:g} (1 - validation)")
        if self.method == "group" and not self.group_column:
            raise ConfigError("finetune.split.group_column", self.group_column, "a column of the input",
                              reason="finetune.split.method=group names its groups by a column")
        if not 0.0 < self.identity <= 1.0:
            raise ConfigError("finetune.split.identity", self.identity, "a fraction in (0, 1]")


@dataclass
class FinetuneConfig:
    """mode: full (every weight trains) | frozen (the head alone: a linear probe by gradient descent) | lora
    (`biotf.model.modes`). cache_features: frozen mode computes the trunk's features of every record once and
    caches them under data.cache_dir (`biotf.finetune.features`); false runs the trunk at every step.
    pool: how a sequence head pools token vectors (mean | cls | max over content tokens, as `biotf embed`).
    resolution: of a token head on a model with a conv stem: base (each token's vector, the bins upsampled) | bin
    (one prediction per bin, trained on the majority label of its tokens; counted in finetune.json), `biotf.model.heads`.
    head_dropout: dropout on the head's input. trunk_lr: learning rate of the trunk's weights (full, lora);
    null means optim.lr. patience: validations without improvement of `monitor` before training stops early.
    monitor: the validation metric that picks the best checkpoint (loss, or a metric of the task).
    tokenizer_options: policies of init_from's tokenizer to change (`unknown: to_unk`, `stop: strip_terminal`, ...;
    null keeps the saved one), never its vocabulary: `biotf.tokenizers.build.with_options`."""

    mode: str = "full"
    cache_features: bool = True
    pool: str = "mean"
    resolution: str = "base"
    head_dropout: float = 0.1
    trunk_lr: Optional[float] = None
    patience: int = 5
    monitor: str = "loss"
    lora: LoRAConfig = field(default_factory=LoRAConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    tokenizer_options: dict[str, Any] = field(default_factory=lambda: dict.fromkeys(POLICY_OPTIONS))

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError("finetune.mode", self.mode, " | ".join(MODES))
        if not isinstance(self.cache_features, bool):
            raise ConfigError("finetune.cache_features", self.cache_features, "true | false")
        if self.pool not in SEQUENCE_POOLS:
            raise ConfigError("finetune.pool", self.pool, " | ".join(SEQUENCE_POOLS))
        if self.resolution not in RESOLUTIONS:
            raise ConfigError("finetune.resolution", self.resolution, " | ".join(RESOLUTIONS))
        if not 0.0 <= self.head_dropout < 1.0:
            raise ConfigError("finetune.head_dropout", self.head_dropout, "0 <= dropout < 1")
        if self.trunk_lr is not None and not self.trunk_lr > 0:
            raise ConfigError("finetune.trunk_lr", self.trunk_lr, "a number > 0, or null (optim.lr)")
        if isinstance(self.patience, bool) or not isinstance(self.patience, int) or self.patience < 1:
            raise ConfigError("finetune.patience", self.patience, "an integer >= 1")
        if self.monitor not in MONITORS:
            raise ConfigError("finetune.monitor", self.monitor, " | ".join(MONITORS))


def check_finetune(task: str | None, init_from: str | None, label_column: str | None,
                   finetune: FinetuneConfig, nonfinite: str = "stop") -> None:
    """Cross-field checks of a fine-tuning run (`task` set), before any data is read. Those that need the model
    (`finetune.check_against_model`) run once init_from is loaded."""
    from pathlib import Path

    from biotf.model.heads import TASKS

    if task is None:
        if init_from is not None:
            raise ConfigError("task", None, " | ".join(TASKS),
                              reason="init_from starts a fine-tuning run, which needs a task")
        return
    if task not in TASKS:
        raise ConfigError("task", task, " | ".join(TASKS))
    if init_from is None:
        raise ConfigError("init_from", None, "a biotf run, checkpoint, exported model or HF ESM-2 / Qwen2 directory",
                          reason="fine-tuning starts from a pretrained model")
    if not Path(init_from).exists():
        raise ConfigError("init_from", init_from, reason="no such file or directory")
    if not label_column:
        raise ConfigError("data.label_column", label_column, "the input column holding the labels",
                          reason=f"task={task} trains on labels")
    allowed = ("loss", "rmse", "spearman") if task == "regression" else ("loss", "accuracy", "f1", "mcc")
    if finetune.monitor not in allowed:
        raise ConfigError("finetune.monitor", finetune.monitor, " | ".join(allowed), reason=f"for task={task}")
    if nonfinite != "stop":
        raise ConfigError("trainer.nonfinite", nonfinite, "stop",
                          reason="a fine-tuning run stops on a non-finite loss: its export must not come from NaN "
                                 "weights")
