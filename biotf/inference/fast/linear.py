"""`StreamedLinear`: nn.Linear with faster inference products for a weight matrix that streams from memory.

Installed by `optimize_for_decoding` when a model's decode matrices outgrow the last-level cache and its plan
(`plan.py`) stores them transposed, a (in, out) row-major block. Inference without gradients takes one of three
paths by row count, each where the plan measured it faster:

- up to `SPLIT_MAX_ROWS` rows (decoding): a BLAS multiplies few rows on one thread, and one core cannot
  draw a matrix from memory at the rate the machine can. The block is cut along its input dimension into
  `threads` contiguous views (no copy); `torch.bmm` multiplies each by its share of the input on its own
  thread and the partial products are summed (`split_product`).
- up to `WEIGHT_FIRST_MAX_ROWS` rows (the prefill of a short prompt): (weight @ x.T).T, the large matrix as
  the BLAS's left operand, returned as that transposed view (`weight_first_product`).
- more rows, gradients, autocast, other devices or layouts, or a path the plan rejected: F.linear.

Each output is the same dot product summed in another order (float32 rounding, about 1e-7 relative).
The row limits were measured on a 2-core CPU (docs/benchmarks.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from biotf.inference.fast.plan import DecodePlan
from biotf.inference.fast.products import split_product, weight_first_product

SPLIT_MAX_ROWS = 16
WEIGHT_FIRST_MAX_ROWS = 256


def streamed_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                    plan: DecodePlan | None = None) -> torch.Tensor:
    """x @ weight.T + bias, as F.linear computes it, by the path its row count calls for (module docstring);
    None: every path allowed (the fixed float32 plan)."""
    out_features, in_features = weight.shape
    rows = x.numel() // in_features if in_features else 0
    split_rows = SPLIT_MAX_ROWS if plan is None or plan.split else 0
    weight_first_rows = WEIGHT_FIRST_MAX_ROWS if plan is None or plan.weight_first else split_rows
    if (rows > weight_first_rows or x.device.type != "cpu" or weight.stride() != (1, out_features)
            or x.dtype != weight.dtype or torch.is_autocast_enabled("cpu")
            or (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))):
        return F.linear(x, weight, bias)
    if rows > split_rows:
        return weight_first_product(x, weight, bias)
    parts = torch.get_num_threads()
    if parts < 2 or in_features % parts:
        return F.linear(x, weight, bias)
    return split_product(x, weight, bias)


class StreamedLinear(nn.Linear):
    """The same Parameters as the nn.Linear it replaces (same state-dict keys); forward is `streamed_linear` with
    the decoding plan it was installed with."""

    def __init__(self, linear: nn.Linear, plan: DecodePlan | None = None):
        nn.Module.__init__(self)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        self.plan = plan

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return streamed_linear(x, self.weight, self.bias, self.plan)
