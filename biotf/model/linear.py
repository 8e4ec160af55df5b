"""`linear`: F.linear, with the few-row products of decoding spread over the CPU's threads.

Decoding multiplies a handful of rows by each weight matrix. For such products MKL works on one thread,
and one core cannot draw a matrix from memory at the rate the machine can. A matrix stored transposed
(`layout.py`) is a (in, out) row-major block, so it cuts along its input dimension into `threads` equal
blocks that are contiguous views of it, no copy; `torch.bmm` multiplies each block by its share of the
input on its own thread, and the partial products are summed. Each thread streams one contiguous block,
the pattern memory serves fastest: per token on the 2-core CPU, the 0.5B Qwen2 shape decoded in 86.8 ms
against 103.9 ms when the output columns were cut instead (strided slices; its down projection, 4,864
inputs by 896 outputs, streamed at 17.6 GB/s cut by columns and 23.5 GB/s cut by inputs), and 132 ms
unsplit. Each output is the same dot product, summed in another order (float32 rounding, about 1e-7
relative).

Splitting pays only when the weights stream from memory: `arrange_for_decoding` turns it on (`split_products`)
when the model's decode matrices outgrow the last-level cache (the small benchmark shape, 20 MB in a 32 MB
L3, was 4% slower split). Products with more than `SPLIT_MAX_ROWS` rows (prefill, training), those that need
gradients, and matrices whose input size the thread count does not divide always take F.linear.
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
    if (parts < 2 or rows > SPLIT_MAX_ROWS or in_features % parts
            or x.device.type != "cpu" or weight.stride() != (1, out_features) or x.dtype != weight.dtype
            or torch.is_autocast_enabled("cpu")
            or (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))):
        return F.linear(x, weight, bias)
    depth = in_features // parts
    blocks = weight.t().view(parts, depth, out_features)  # consecutive input rows of the (in, out) block
    shares = x.reshape(rows, parts, depth).transpose(0, 1)  # (parts, rows, depth): each block's input
    y = torch.bmm(shares, blocks).sum(0).view(*x.shape[:-1], out_features)
    return y if bias is None else y.add_(bias)


class Linear(nn.Linear):
    """nn.Linear (same parameters and state-dict keys) whose forward is `linear`."""

    split_products = False  # set by `arrange_for_decoding`

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, self.split_products)
