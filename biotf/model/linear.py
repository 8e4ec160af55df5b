"""`linear`: F.linear, with faster inference products for weight matrices that stream from memory.

When a model's decode matrices outgrow the last-level cache, `arrange_for_decoding` marks its linear layers
`weights_streamed`. Each such matrix is stored transposed (`layout.py`): a (in, out) row-major block. Measured
on the 2-core CPU (32 MB L3), inference without gradients then takes one of three paths by row count:

- up to `SPLIT_MAX_ROWS` rows (decoding): MKL multiplies few rows on one thread, and one core cannot draw a
  matrix from memory at the rate the machine can. The block is cut along its input dimension into `threads`
  contiguous views, no copy; `torch.bmm` multiplies each by its share of the input on its own thread and the
  partial products are summed. 0.5B Qwen2 shape, per token: 86.8 ms, against 103.9 ms when cut by output
  columns (strided slices; its down projection streamed at 17.6 GB/s that way, 23.5 GB/s by input blocks)
  and 132 ms unsplit.
- up to `WEIGHT_FIRST_MAX_ROWS` rows (the prefill of a short prompt): the product is computed as
  (weight @ x.T).T, the large matrix as MKL's left operand, and returned as that transposed view. 0.5B shape,
  prefill against `transformers`: 1.32x / 1.22x / 1.13x for 64 / 128 / 256 prompt tokens, against 1.06x /
  1.07x / 1.03x as x @ weight.T; at 512 tokens 1.00x against 1.14x, so longer inputs keep F.linear.
- more rows: F.linear.

Each output is the same dot product, summed in another order (float32 rounding, about 1e-7 relative).
Cache-resident matrices gain nothing (the small benchmark shape, 20 MB, was 4% slower split and its prefill
slower weight-first), so they are never marked. Products that need gradients, and matrices whose input size
the thread count does not divide (for the split), take F.linear.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

SPLIT_MAX_ROWS = 16
WEIGHT_FIRST_MAX_ROWS = 256


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           weights_streamed: bool = False) -> torch.Tensor:
    """x @ weight.T + bias, as F.linear computes it; for `weights_streamed` matrices, by the path its row count
    calls for (see the module docstring)."""
    if not weights_streamed:  # the common case first: nothing to compute
        return F.linear(x, weight, bias)
    out_features, in_features = weight.shape
    rows = x.numel() // in_features if in_features else 0
    if (rows > WEIGHT_FIRST_MAX_ROWS or x.device.type != "cpu" or weight.stride() != (1, out_features)
            or x.dtype != weight.dtype or torch.is_autocast_enabled("cpu")
            or (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))):
        return F.linear(x, weight, bias)
    if rows > SPLIT_MAX_ROWS:
        flat = x.reshape(rows, in_features).t()
        y = torch.mm(weight, flat) if bias is None else torch.addmm(bias[:, None], weight, flat)
        return y.t().view(*x.shape[:-1], out_features)
    parts = torch.get_num_threads()
    if parts < 2 or in_features % parts:
        return F.linear(x, weight, bias)
    depth = in_features // parts
    blocks = weight.t().view(parts, depth, out_features)  # consecutive input rows of the (in, out) block
    shares = x.reshape(rows, parts, depth).transpose(0, 1)  # (parts, rows, depth): each block's input
    y = torch.bmm(shares, blocks).sum(0).view(*x.shape[:-1], out_features)
    return y if bias is None else y.add_(bias)


class Linear(nn.Linear):
    """nn.Linear (same parameters and state-dict keys) whose forward is `linear`."""

    weights_streamed = False  # set by `arrange_for_decoding`

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias, self.weights_streamed)
