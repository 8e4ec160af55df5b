"""The two products the streamed path may take instead of F.linear, on a transposed ((in, out) row-major) weight:
weight-first for short prefills, split over the threads for a few rows. Their own module because both the plan
(`plan.py`, which times them) and the streamed linear (`linear.py`, which takes them where the plan kept them) need
them."""

from __future__ import annotations

import torch


def weight_first_product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear(x, weight, bias) as (weight @ x.T).T, returned as that transposed view."""
    out_features, in_features = weight.shape
    flat = x.reshape(-1, in_features).t()
    y = torch.mm(weight, flat) if bias is None else torch.addmm(bias[:, None], weight, flat)
    return y.t().view(*x.shape[:-1], out_features)


def split_product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """F.linear(x, weight, bias) for a transposed `weight` cut into one block of input rows per thread (the number
    of threads must divide in_features)."""
    out_features, in_features = weight.shape
    parts = torch.get_num_threads()
    depth = in_features // parts
    blocks = weight.t().view(parts, depth, out_features)  # consecutive input rows of the (in, out) block
    shares = x.reshape(-1, parts, depth).transpose(0, 1)  # (parts, rows, depth): each block's input
    y = torch.bmm(shares, blocks).sum(0).view(*x.shape[:-1], out_features)
    return y if bias is None else y.add_(bias)
