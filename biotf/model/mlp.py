"""The position-wise feed-forward network, one class per `mlp` value.

- gelu / gelu_tanh / relu: d_model -> d_ff -> activation -> d_model (gelu is the exact erf form of BERT and ESM-2;
  gelu_tanh the tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) of GPT-2 and BLOOM, HF `gelu_new`;
  ReLU is Vaswani et al. 2017).
- swiglu (Shazeer 2020, "GLU Variants Improve Transformer"): down(silu(gate(x)) * up(x)), as Llama and
  Qwen2. Gate and up are one fused matrix `gate_up` of 2 * d_ff rows (gate first); `hf.py` splits it. The same
  gated form with the paper's other activations: geglu (exact GELU), geglu_tanh (its tanh approximation: T5 v1.1's
  and Ankh's `gated-gelu`, which transformers computes with `gelu_new`), reglu (ReLU).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn


if TYPE_CHECKING:  # config.py imports this registry to know the allowed `mlp` values
    from biotf.model.config import TransformerConfig

# The elementwise activations of the two-projection MLP (`mlp`) and of the masked-LM head (`lm_head_activation`).
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu, "gelu_tanh": partial(F.gelu, approximate="tanh"), "relu": F.relu}


class FeedForward(nn.Module):
    """Two projections around an elementwise activation (`mlp: gelu | gelu_tanh | relu`)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.up = nn.Linear(config.d_model, config.d_ff, bias=config.bias)
        self.down = nn.Linear(config.d_ff, config.d_model, bias=config.bias)
        self.activation_name = config.mlp
        self.activation = ACTIVATIONS[config.mlp]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.hidden(x))

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """The d_ff features `down` projects (a block adds its residual inside that product where it can)."""
        return self.activation(self.up(x))


# The gated MLPs (`mlp`) and the activation of their gate.
GATED_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "swiglu": F.silu, "geglu": ACTIVATIONS["gelu"], "geglu_tanh": ACTIVATIONS["gelu_tanh"], "reglu": F.relu}


class SwiGLU(nn.Module):
    """down(act(gate(x)) * up(x)) with gate and up fused into one projection; act is silu for swiglu (the others:
    `GATED_ACTIVATIONS`)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.gate_up = nn.Linear(config.d_model, 2 * config.d_ff, bias=config.bias)
        self.down = nn.Linear(config.d_ff, config.d_model, bias=config.bias)
        self.activation = GATED_ACTIVATIONS[config.mlp]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.hidden(x))

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """The d_ff features `down` projects (a block adds its residual inside that product where it can)."""
        gate, up = self.gate_up(x).chunk(2, dim=-1)  # two halves of d_ff
        return self.activation(gate) * up


MLP_CLASSES: dict[str, type[nn.Module]] = {**dict.fromkeys(ACTIVATIONS, FeedForward),
                                           **dict.fromkeys(GATED_ACTIVATIONS, SwiGLU)}


def build_mlp(config: TransformerConfig) -> nn.Module:
    return MLP_CLASSES[config.mlp](config)
