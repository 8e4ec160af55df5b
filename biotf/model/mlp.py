"""The position-wise feed-forward network, one class per `mlp` value.

- gelu / relu: d_model -> d_ff -> activation -> d_model (GELU is the exact erf form of BERT and ESM-2;
  ReLU is Vaswani et al. 2017).
- swiglu (Shazeer 2020, "GLU Variants Improve Transformer"): down(silu(gate(x)) * up(x)), as Llama and
  Qwen2. Gate and up are one fused matrix `gate_up` of 2 * d_ff rows (gate first); `hf.py` splits it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn


if TYPE_CHECKING:  # config.py imports this registry to know the allowed `mlp` values
    from biotf.model.config import TransformerConfig


class FeedForward(nn.Module):
    """Two projections around an elementwise activation (`mlp: gelu | relu`)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.up = nn.Linear(config.d_model, config.d_ff, bias=config.bias)
        self.down = nn.Linear(config.d_ff, config.d_model, bias=config.bias)
        self.activation = F.gelu if config.mlp == "gelu" else F.relu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.activation(self.up(x)))


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)) with gate and up fused into one projection."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.gate_up = nn.Linear(config.d_model, 2 * config.d_ff, bias=config.bias)
        self.down = nn.Linear(config.d_ff, config.d_model, bias=config.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up(x).chunk(2, dim=-1)  # two halves of d_ff
        return self.down(F.silu(gate) * up)


MLP_CLASSES: dict[str, type[nn.Module]] = {"gelu": FeedForward, "relu": FeedForward, "swiglu": SwiGLU}


def build_mlp(config: TransformerConfig) -> nn.Module:
    return MLP_CLASSES[config.mlp](config)
