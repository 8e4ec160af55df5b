"""Normalisation layers, one per `norm` value: LayerNorm (Ba et al. 2016) and RMSNorm (Zhang & Sennrich 2019)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

if TYPE_CHECKING:  # config.py imports this registry to know the allowed `norm` values
    from biotf.model.config import TransformerConfig


class LayerNorm(nn.Module):
    """Mean-and-variance normalisation over `width` features (default d_model) with a gain, and a bias when `bias`
    (default `config.norm_has_bias`; GPT-2, ESM-2 have one)."""

    def __init__(self, config: TransformerConfig, width: int | None = None, bias: bool | None = None):
        super().__init__()
        width = width or config.d_model
        self.eps = config.norm_eps
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width)) if (config.norm_has_bias if bias is None else bias) else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


class _RMSNormFunction(torch.autograd.Function):
    """float32 RMSNorm with a hand-written backward: 5 passes over the activations where autograd of the
    composite (pow, mean, add, rsqrt, two muls) takes about twice as many. Saves x / rms rather than x.

    d/dx of w * x * r, r = (mean(x^2) + eps)^-1/2:  r * (g w - x_hat * mean(g w * x_hat)),  x_hat = x r.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        rstd = torch.rsqrt(x.square().mean(-1, keepdim=True).add_(eps))
        normalized = x * rstd
        ctx.save_for_backward(normalized, weight, rstd)
        return normalized * weight

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        normalized, weight, rstd = ctx.saved_tensors
        grad_weight = None
        if ctx.needs_input_grad[1]:
            grad_weight = (grad * normalized).flatten(0, -2).sum(0)
        grad_normalized = grad * weight
        projection = (grad_normalized * normalized).mean(-1, keepdim=True)
        grad_x = grad_normalized.sub_(normalized * projection).mul_(rstd)
        return grad_x, grad_weight, None


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight, computed in float32 and cast back before the gain, as HF Qwen2RMSNorm."""

    def __init__(self, config: TransformerConfig, width: int | None = None, bias: bool | None = None):
        """RMSNorm has no bias: `bias` is taken for `build_norm`'s one signature (a config asking one is refused)."""
        super().__init__()
        self.eps = config.norm_eps
        self.weight = nn.Parameter(torch.ones(width or config.d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32:
            if torch.is_grad_enabled() and self.weight.dtype == torch.float32 and (x.requires_grad
                                                                                    or self.weight.requires_grad):
                return _RMSNormFunction.apply(x, self.weight, self.eps)
            return F.rms_norm(x, x.shape[-1:], self.weight, self.eps)
        normalized = F.rms_norm(x.float(), x.shape[-1:], None, self.eps).to(x.dtype)
        return self.weight * normalized


NORM_CLASSES: dict[str, type[nn.Module]] = {"layernorm": LayerNorm, "rmsnorm": RMSNorm}


def build_norm(config: TransformerConfig, width: int | None = None, bias: bool | None = None) -> nn.Module:
    """A `config.norm` over `width` features (default d_model; ALBERT's embedding norm: d_embed), with a bias where
    the class has one and `bias` (default: `config.norm_has_bias`, the blocks' and the embedding's) says so. Only
    what differs from those defaults is passed, so that a registered norm class taking the config alone still serves
    every model that needs nothing else of it."""
    options = {name: value for name, value, default in (("width", width, config.d_model),
                                                        ("bias", bias, config.norm_has_bias))
               if value is not None and value != default}
    return NORM_CLASSES[config.norm](config, **options)
