"""bfloat16 inference linears on oneDNN with the bias, and the MLP's activation, computed inside the product.

`torch.nn.functional.linear` with a bias runs on the CPU as `addmm`: the bias is first copied into every row of the
output, then the product is added to it, one more pass over the output than the product needs; the MLP's activation
is another. oneDNN's linear (`torch.ops.mkldnn._linear_pointwise`, the kernel PyTorch's own CPU compiler emits for
frozen linears) adds the bias and applies GELU / ReLU while the output tile is still in registers, and `plus` adds a
block's residual stream inside its attention's output projection and its MLP's down projection the same way. On a
2-core Xeon with AMX (other jobs running), at 16,384 tokens of ESM-2 8M's widths, a 320 -> 1,280 linear with its GELU
took 0.66x the time of `F.linear` then `F.gelu`, and the 320 -> 960 attention input 0.69x; at 9,216 tokens a
320 -> 320 projection with the residual added inside 0.5x the time of the product then the add;
`python scripts/bench.py inference` times whole bf16 embedding and scoring with it.

`fuse_linears` swaps every plain nn.Linear of a bf16 network's blocks for a `Bf16Linear` (the same parameters: state
dicts and exports are unchanged), and folds a two-projection MLP's activation into its first projection. The fused
product runs only where it is exact to compute: bfloat16 inputs on the CPU, no gradient (inference); anything else
takes `F.linear` and the activation as before. It is used where the CPU has native bfloat16 products (AMX-BF16 or
AVX512-BF16: `biotf.model.precision`), the CPUs where `auto` picks bf16.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from biotf.model.mlp import ACTIVATIONS, FeedForward

# oneDNN's name and algorithm for each activation of `mlp.ACTIVATIONS` it can apply inside the product.
ONEDNN_ACTIVATIONS: dict[str, tuple[str, str]] = {"gelu": ("gelu", "none"), "gelu_tanh": ("gelu", "tanh"),
                                                  "relu": ("relu", "")}


@functools.cache
def available() -> bool:
    """Whether this PyTorch build has oneDNN's linear and it computes a bf16 product on this CPU (one tiny product,
    tried once: oneDNN builds no bf16 kernel for some older CPUs)."""
    if not (torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")):
        return False
    try:
        ones = torch.ones(2, 4, dtype=torch.bfloat16)
        product = torch.ops.mkldnn._linear_pointwise(ones, ones, None, "none", [], "")
    except RuntimeError:
        return False
    return bool((product == 4).all())


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


class Bf16Linear(nn.Linear):
    """An nn.Linear (the same weight and bias) whose bf16 CPU inference product runs on oneDNN with its bias and
    `activation` (a key of `ONEDNN_ACTIVATIONS`, or None) applied inside it (module docstring)."""

    def __init__(self, linear: nn.Linear, activation: str | None = None):
        super().__init__(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta")
        self.weight, self.bias = linear.weight, linear.bias
        self.activation = activation

    def fuses(self, x: torch.Tensor) -> bool:
        """Whether the product of `x` runs on oneDNN: bfloat16 on the CPU, nothing needing gradients."""
        return (x.dtype == torch.bfloat16 and x.device.type == "cpu" and self.weight.dtype == torch.bfloat16
                and not (torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fuses(x):
            name, algorithm = ONEDNN_ACTIVATIONS[self.activation] if self.activation else ("none", "")
            return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, name, [], algorithm)
        y = F.linear(x, self.weight, self.bias)
        return y if self.activation is None else ACTIVATIONS[self.activation](y)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, activation={self.activation}, oneDNN"


def plus(residual: torch.Tensor, linear: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """residual + linear(x), a residual branch's last projection added to the stream: for a `Bf16Linear` without
    activation on its oneDNN path the add happens inside the product (one rounding, no pass over the output for the
    add), otherwise as written."""
    if isinstance(linear, Bf16Linear) and linear.activation is None and linear.fuses(x) and residual.dtype == x.dtype:
        return torch.ops.mkldnn._linear_pointwise.binary(x, residual, linear.weight, linear.bias, "add")
    return residual + linear(x)


def fuse_linears(blocks: nn.Module) -> list[tuple[nn.Module, str, object]]:
    """Every plain nn.Linear of `blocks` (a transformer's) replaced in place by a `Bf16Linear`, a two-projection
    MLP's activation moved into its first one; returns (module, attribute, what it held) for each change, to undo.
    Adapters (LoRALinear, a subclass) and int8 linears keep their own forward."""
    changed: list[tuple[nn.Module, str, object]] = []
    for parent in list(blocks.modules()):
        fused = (isinstance(parent, FeedForward) and type(parent.up) is nn.Linear
                 and parent.activation_name in ONEDNN_ACTIVATIONS)
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                changed.append((parent, name, child))
                setattr(parent, name, Bf16Linear(child, parent.activation_name if fused and name == "up" else None))
        if fused:
            changed.append((parent, "activation", parent.activation))
            parent.activation = _identity
    return changed

