"""LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models"): a frozen linear layer plus a
trainable low-rank update,

    y = x W.T + b + (alpha / rank) * (x A.T) B.T,    A: (rank, in), B: (out, rank), B initialised to zero,

so that training starts from exactly the pretrained function. A is initialised as `peft` does (Kaiming uniform,
a = sqrt(5), nn.Linear's default), B with zeros.

Targets are named by the model's own linear layers (`Attention.qkv`, `Attention.out`, `FeedForward.up` /
`SwiGLU.gate_up`, `down`). `qkv` and `gate_up` are fused projections, so one adapter spans q, k and v (or gate
and up): their updates share A and differ in B's rows, a rank-r update of the stacked matrix (peft, on separate
q/k/v layers, gives each its own A: up to three times the rank for the same r).

`LoRALinear` keeps the wrapped layer's `weight` and `bias` Parameters under their own names, so a state dict of
an adapted model still holds the trunk's keys unchanged, plus `lora_a` / `lora_b` per target. `save_adapter`
writes those alone (safetensors, with rank / alpha / targets in its metadata); `merge_lora` folds them into the
weights and returns plain nn.Linear layers.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn

from biotf.errors import ConfigError, InputError
from biotf.untrusted import open_safetensors, parse_json_object, read_safetensors

# The linear layers a target name may select (the attribute name of a `Linear` inside a block).
TARGETS = ("qkv", "out", "up", "gate_up", "down")
ADAPTER_KEYS = ("lora_a", "lora_b")


@dataclass
class LoRAConfig:
    """Adapters of `rank` on the linear layers named in `targets`, scaled by alpha / rank, with dropout on their
    input: the one place these values are checked (the `finetune.lora` node, `apply_lora`, `load_adapter`);
    whether they fit a model is `check_lora`'s."""

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    targets: list[str] = field(default_factory=lambda: ["qkv", "out"])

    def __post_init__(self) -> None:
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or self.rank < 1:
            raise ConfigError("finetune.lora.rank", self.rank, "an integer >= 1")
        if not self.alpha > 0:
            raise ConfigError("finetune.lora.alpha", self.alpha, "a number > 0")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError("finetune.lora.dropout", self.dropout, "0 <= dropout < 1")
        if not self.targets or any(t not in TARGETS for t in self.targets):
            raise ConfigError("finetune.lora.targets", list(self.targets), "a non-empty list of " + " | ".join(TARGETS))


class LoRALinear(nn.Linear):
    """An nn.Linear whose weight and bias are frozen and whose output adds (alpha / rank) x A.T B.T."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, dropout: float = 0.0):
        nn.Module.__init__(self)
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight, self.bias = base.weight, base.bias  # the same Parameters: the trunk's keys stay
        self.weight.requires_grad_(False)
        if self.bias is not None:
            self.bias.requires_grad_(False)
        self.rank, self.alpha, self.scale = rank, alpha, alpha / rank
        self.lora_a = nn.Parameter(torch.empty(rank, self.in_features, dtype=base.weight.dtype,
                                               device=base.weight.device))
        self.lora_b = nn.Parameter(torch.zeros(self.out_features, rank, dtype=base.weight.dtype,
                                               device=base.weight.device))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))
        self.lora_dropout = nn.Dropout(dropout) if dropout > 0 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        update = F.linear(F.linear(x if self.lora_dropout is None else self.lora_dropout(x), self.lora_a), self.lora_b)
        return F.linear(x, self.weight, self.bias) + self.scale * update

    def merged(self) -> nn.Linear:
        """A plain nn.Linear computing the same function (W + scale B A, same bias), trainable again."""
        plain = nn.Linear(self.in_features, self.out_features, bias=self.bias is not None,
                       device=self.weight.device, dtype=self.weight.dtype)
        with torch.no_grad():
            plain.weight.copy_(self.weight + self.scale * (self.lora_b @ self.lora_a))
            if self.bias is not None:
                plain.bias.copy_(self.bias)
        return plain


def _targeted(model: nn.Module, targets: list[str]) -> list[tuple[nn.Module, str, nn.Linear]]:
    """(parent, attribute, layer) of every Linear whose attribute name is a target, in module order."""
    found = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
             if name in targets and isinstance(child, nn.Linear)]
    missing = sorted(set(targets) - {name for _, name, _ in found})
    if missing:
        raise ConfigError("finetune.lora.targets", list(targets), "the linear layers this model has: " + ", ".join(
            sorted({n for p in model.modules() for n, c in p.named_children() if n in TARGETS})),
            reason=f"this model has no layer named {missing[0]!r} (swiglu MLPs have gate_up, the other MLPs up)")
    return found


def check_lora(model: nn.Module, settings: LoRAConfig) -> list[tuple[nn.Module, str, nn.Linear]]:
    """The layers `settings.targets` select (see `_targeted`), once its rank is known to fit them: a rank above the
    narrowest layer's width (min of its inputs and outputs) adds parameters and no expressiveness, so it cannot be
    meant."""
    rank = settings.rank
    layers = _targeted(model, list(settings.targets))
    _, name, narrowest = min(layers, key=lambda layer: min(layer[2].in_features, layer[2].out_features))
    width = min(narrowest.in_features, narrowest.out_features)
    if rank > width:
        raise ConfigError("finetune.lora.rank", rank, f"an integer from 1 to {width}",
                          reason=f"the narrowest adapted layer ({name}, {narrowest.in_features} -> "
                                 f"{narrowest.out_features}) has rank {width} at most")
    return layers


def apply_lora(model: nn.Module, targets: list[str], rank: int, alpha: float, dropout: float = 0.0) -> int:
    """Freeze every parameter of `model` and wrap the targeted linear layers in `LoRALinear` (in place).
    Returns the number of trainable adapter parameters."""
    layers = check_lora(model, LoRAConfig(rank, alpha, dropout, list(targets)))
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    for parent, name, layer in layers:
        if isinstance(layer, LoRALinear):
            raise InputError(f"layer {name!r} already carries a LoRA adapter; merge it (merge_lora) first")
        setattr(parent, name, LoRALinear(layer, rank, alpha, dropout))
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def merge_lora(model: nn.Module) -> int:
    """Fold every adapter into its weight (in place); the model is then a plain one. Returns how many were merged."""
    adapted = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
               if isinstance(child, LoRALinear)]
    for parent, name, layer in adapted:
        setattr(parent, name, layer.merged())
    return len(adapted)


def adapter_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapter tensors alone, under the model's state-dict names (e.g. `blocks.0.attn.qkv.lora_a`)."""
    return {k: v for k, v in model.state_dict().items() if k.rsplit(".", 1)[-1] in ADAPTER_KEYS}


def _settings(model: nn.Module) -> dict[str, object]:
    layers = {(name.rsplit(".", 1)[-1], m.rank, m.alpha) for name, m in model.named_modules()
              if isinstance(m, LoRALinear)}
    if not layers:
        raise InputError("the model carries no LoRA adapter to save (apply_lora first)")
    ranks = {(r, a) for _, r, a in layers}
    if len(ranks) != 1:
        raise InputError(f"adapters of several ranks/alphas {sorted(ranks)}; save_adapter writes one setting")
    (rank, alpha), = ranks
    return {"rank": rank, "alpha": alpha, "targets": sorted({t for t, _, _ in layers})}


def save_adapter(model: nn.Module, path: str | Path) -> Path:
    """Write the adapter tensors (safetensors) with rank, alpha and targets in the file's metadata."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous() for k, v in adapter_state_dict(model).items()}
    save_file(tensors, str(path), metadata={"biotf_lora": json.dumps(_settings(model))})
    return path


def load_adapter(model: nn.Module, path: str | Path) -> dict[str, object]:
    """Wrap `model`'s layers as the adapter file says and load its tensors; every adapter key must match.
    Returns the settings (rank, alpha, targets)."""
    with open_safetensors(path, "LoRA adapter", InputError) as handle:
        metadata = handle.metadata() or {}
    if "biotf_lora" not in metadata:
        raise InputError(f"{path}: not a biotf LoRA adapter (no biotf_lora metadata)")
    settings = parse_json_object(metadata["biotf_lora"], str(path), "LoRA adapter metadata",
                                 types={"targets": list, "rank": int, "alpha": (int, float)},
                                 required=["targets", "rank", "alpha"])
    tensors = read_safetensors(path, "LoRA adapter", InputError)
    apply_lora(model, settings["targets"], settings["rank"], settings["alpha"])
    expected = adapter_state_dict(model)
    if set(tensors) != set(expected):
        difference = sorted(set(tensors) ^ set(expected))
        raise InputError(f"{path}: adapter keys do not match this model (first difference: {difference[0]})")
    for key, tensor in tensors.items():
        if tensor.shape != expected[key].shape:
            raise InputError(f"{path}: {key} has shape {tuple(tensor.shape)}, the model needs "
                             f"{tuple(expected[key].shape)}")
    model.load_state_dict(tensors, strict=False)
    return settings
