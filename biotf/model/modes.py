"""Fine-tuning modes: which weights train, what a step runs, and what the export holds beside the merged trunk.

    full    every weight trains (the trunk at finetune.trunk_lr)
    frozen  the head alone, a linear probe trained by gradient descent; the trunk's features of every record are
            computed once and cached (`features`, finetune.cache_features), so a step runs the head only
    lora    low-rank adapters on the trunk's linear layers and the head (Hu et al. 2021, `biotf.model.lora`);
            the export merges them into the trunk and keeps the adapter alone beside it

A new mode is a `Mode` subclass registered under its name (`finetune.mode=<name>`).
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from biotf.model import Transformer
from biotf.model.lora import LoRAConfig, apply_lora, check_lora, merge_lora, save_adapter

MODES: dict[str, type[Mode]] = {}


def register_mode(name: str):
    def register(cls: type[Mode]) -> type[Mode]:
        cls.name = name
        MODES[name] = cls
        return cls
    return register


class Mode:
    """A fine-tuning mode. `trains_trunk`: whether any trunk weight changes (if not, the trunk's features are fixed
    and may be cached)."""

    name: ClassVar[str]
    trains_trunk: ClassVar[bool] = True

    def __init__(self, lora: LoRAConfig):
        self.lora = lora

    def check(self, trunk: Transformer) -> None:
        """Refuse, before any data is read, settings this trunk cannot take."""

    def prepare(self, trunk: Transformer) -> None:
        """Make the trunk's weights that train trainable, and only those (in place)."""

    def before_export(self, trunk: Transformer, adapter_path: Path) -> Path | None:
        """Turn the trained trunk into a plain one for the export; returns a file to keep beside it, if any."""
        return None


@register_mode("full")
class Full(Mode):
    pass


@register_mode("frozen")
class Frozen(Mode):
    trains_trunk = False

    def prepare(self, trunk: Transformer) -> None:
        for parameter in trunk.parameters():
            parameter.requires_grad_(False)


@register_mode("lora")
class LoRA(Mode):
    def check(self, trunk: Transformer) -> None:
        check_lora(trunk, self.lora)

    def prepare(self, trunk: Transformer) -> None:
        apply_lora(trunk, list(self.lora.targets), self.lora.rank, self.lora.alpha, self.lora.dropout)

    def before_export(self, trunk: Transformer, adapter_path: Path) -> Path | None:
        """The adapter alone (it fits the unchanged base), then merged into the weights."""
        saved = save_adapter(trunk, adapter_path)
        merge_lora(trunk)
        return saved


def build_mode(name: str, lora: LoRAConfig) -> Mode:
    return MODES[name](lora)
