"""`linear`: F.linear, with the few-row products of decoding spread over the CPU's threads.

Decoding multiplies a handful of rows by each weight matrix. For such products MKL works on one thread,
and one core cannot draw a matrix from memory at the rate the machine can. A matrix stored transposed
(`layout.py`) is a (in, out) row-major block, so its output columns split into `threads` equal slices that
are strided views of it, no copy; `torch.bmm` over the slices runs one on each thread. Each output is the
same dot product as before, perhaps summed in another order (float32 rounding, about 1e-7 relative).

Splitting pays only when the weights stream from memory: `arrange_for_decoding` turns it on (`split_products`)
when the model's decode matrices outgrow the last-level cache. Measured per decoded token on the 2-core CPU
(32 MB L3): the 0.5B Qwen2 shape (1.9 GB) 132 ms unsplit, 109 ms split (1.21x); the small benchmark shape
(20 MB, cache-resident) 4% slower with its largest matrix split, so it is not. Products with more than
`SPLIT_MAX_ROWS` rows (prefill, training) and those that need gradients always take F.linear.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SPLIT_MAX_ROWS = 16


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           split: bool = False) -> torch.Tensor:
    """x @ weight.T + bias, as F.linear computes it; with `split`, few rows run split (see the module docstring)."""
    if not split:  # the common case first: nothing to compute
        return F.linear(x, weight, bias)
    out_features, in_features = weight.shape
    parts = torch.get_num_threads()
    rows = x.numel() // in_features if in_features else 0
    if (parts < 2 or rows > SPLIT_MAX_ROWS or out_features % parts
            or x.device.type != "cpu" or weight.stride() != (1, out_features) or x.dtype != weight.dtype
            or torch.is_autocast_enabled("cpu")
            or (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))):
        return F.linear(x, weight, bias)
    width = out_features // parts
    slices = weight.t().as_strided((parts, in_features, width), (width, out_features, 1))
    y = torch.bmm(x.reshape(1, rows, in_features).expand(parts, rows, in_features), slices)  # (parts, rows, width)
    y = y.transpose(0, 1).reshape(*x.shape[:-1], out_features)
    return y if bias is None else y.add_(bias)


class Linear(nn.Linear):
    """nn.Linear (same parameters and state-dict keys) whose forward is `linear`."""

    split_products = False  # set by `arrange_for_decoding`

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, self.split_products)
