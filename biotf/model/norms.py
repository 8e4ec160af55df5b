"""Normalisation layers, one per `norm` value: LayerNorm (Ba et al. 2016) and RMSNorm (Zhang & Sennrich 2019)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from biotf.model.config import TransformerConfig


class LayerNorm(nn.Module):
    """Mean-and-variance normalisation with a gain, and a bias when `config.bias` (GPT-2, ESM-2 have one)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.eps = config.norm_eps
        self.weight = nn.Parameter(torch.ones(config.d_model))
        self.bias = nn.Parameter(torch.zeros(config.d_model)) if config.bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, computed in float32 and cast back before the gain, as HF Qwen2RMSNorm."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.eps = config.norm_eps
        self.weight = nn.Parameter(torch.ones(config.d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:
            return F.rms_norm(x, x.shape[-1:], self.weight, self.eps)
        normalized = F.rms_norm(x.float(), x.shape[-1:], None, self.eps).to(x.dtype)
        return self.weight * normalized


NORM_CLASSES: dict[str, type[nn.Module]] = {"layernorm": LayerNorm, "rmsnorm": RMSNorm}


def build_norm(config: TransformerConfig) -> nn.Module:
    return NORM_CLASSES[config.norm](config)
