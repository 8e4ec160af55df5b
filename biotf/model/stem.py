"""The convolutional stem (`stem: conv`): bases in, bins out before the blocks, and bins back to bases after them.

    embedded tokens (B, L, d_model), real tokens packed to the front of each row
      -> per stage s (stem_widths[s] channels, stem_pool[s] factor):
           conv (stem_kernel wide, zero-padded 'same') -> + residual [LayerNorm -> GELU -> 1x1 conv]
           -> max-pool by stem_pool[s] over real positions only
      -> linear to d_model (if the last width differs)                 = bins (B, ceil(L / stem_factor), d_model)
    after the blocks, per token (the LM head, base-resolution task heads; `Stem.upsample`):
      each token takes its bin's vector (repeat) + a linear map of stage 1's features at that token (before its
      pooling: a U-Net skip) -> norm                                   = (B, L, d_model), the input's layout

References: Enformer (Avsec et al. 2021, Nature Methods; deepmind-research/enformer/enformer.py): a conv stem of
width 15, then conv-tower stages (BatchNorm -> GELU -> conv, a residual 1x1 conv block, pooling by 2), 7 halvings
from bases to 128-bp bins. Borzoi (Linder et al. 2023) returns to finer resolution with a U-Net: upsampling plus
skip connections from the stem's stages. Ours is smaller and differs on purpose:
- one kernel for every stage (Enformer: 15, then 5), and the stem reads the token embedding, not one-hot bases;
- LayerNorm over channels at each position instead of BatchNorm, so a record's bins never depend on its batch
  mates or on padding;
- max pooling over a bin's real bases (Enformer pools with a learned softmax attention); a bin is real if any of its
  bases is, and a bin with none (all padding) is zero;
- upsampling is repeat + one skip from the first stage, then a norm (Borzoi: a skip at every resolution). Repeat
  alone gives every base of a bin the same logits, so a masked-LM could not tell two masked bases of one bin apart;
  a transposed convolution (one learned map per offset in the bin) would still not see the bases themselves. The
  skip gives each base its own local features (stem_kernel bases around it) and the bin's vector the long range.

Padding: the real tokens of each row are packed to its front first (a stable sort of the attention mask: left
padding becomes right padding), so bins are counted from each record's first token whatever the padding side, and
per-token outputs are put back in place (`BinLayout.to_tokens`). Padded positions are zeroed after every
convolution, so a real base's bin never sees a pad; the last bin of a record whose length is not a multiple of the
factor holds the remaining real bases only. Padded bins are masked out of attention (the bins' attention mask).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from biotf.conventions import IGNORE_INDEX
from biotf.model.config import TransformerConfig
from biotf.model.norms import build_norm


class BinLayout(NamedTuple):
    """How a batch's tokens became bins. `order` packs real tokens to the front of each row (None: no attention mask,
    every token real); `keep` marks the packed real tokens (None: all); `mask` is the bins' attention mask (None:
    all real); `skip` is stage 1's per-token features (packed), what the upsampling adds back."""

    order: torch.Tensor | None
    keep: torch.Tensor | None
    mask: torch.Tensor | None
    skip: torch.Tensor
    length: int
    factor: int

    def pack(self, values: torch.Tensor) -> torch.Tensor:
        """(B, L, ...) in the input's layout -> real tokens first in each row."""
        return values if self.order is None else values.gather(1, _expand(self.order, values))

    def unpack(self, values: torch.Tensor) -> torch.Tensor:
        """The inverse of `pack`."""
        return values if self.order is None else torch.empty_like(values).scatter_(1, _expand(self.order, values),
                                                                                   values)

    def repeat(self, bins: torch.Tensor) -> torch.Tensor:
        """(B, n_bins, ...) -> (B, L, ...) packed: each token its bin's values."""
        return bins.repeat_interleave(self.factor, dim=1)[:, :self.length]

    def to_tokens(self, bins: torch.Tensor) -> torch.Tensor:
        """(B, n_bins, ...) -> (B, L, ...) in the input's layout: each token carries its bin's values (padding gets a
        neighbour's: unspecified, as every padded output)."""
        return self.unpack(self.repeat(bins))

    def bin_labels(self, labels: torch.Tensor, n_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`majority_bins` of per-token labels (B, L) in the input's layout."""
        return majority_bins(self.pack(labels), self.factor, n_classes)


def majority_bins(labels: torch.Tensor, factor: int, n_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token class labels (B, L), -100 = none, real tokens first in each row -> (bin labels (B, ceil(L /
    factor)), the number of labelled tokens whose label differs from their bin's). A bin's label is the most frequent
    among its labelled tokens, a tie going to the smallest class id; a bin without a labelled token gets -100."""
    length = labels.shape[1]
    n_bins = -(-length // factor)
    labels = F.pad(labels, (0, n_bins * factor - length), value=IGNORE_INDEX)
    labelled = labels != IGNORE_INDEX
    votes = F.one_hot(labels.clamp(min=0), n_classes) * labelled.unsqueeze(-1)
    counts = votes.view(labels.shape[0], n_bins, factor, n_classes).sum(2)
    winners = counts.argmax(-1)  # the first maximum: ties go to the smallest class id
    bins = winners.masked_fill(counts.sum(-1) == 0, IGNORE_INDEX)
    outvoted = (labelled & (labels != bins.repeat_interleave(factor, dim=1))).sum()
    return bins, outvoted


def _expand(order: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    return order.view(*order.shape, *([1] * (values.dim() - 2))).expand_as(values)


class ConvStage(nn.Module):
    """conv -> + residual (LayerNorm -> GELU -> 1x1 conv); padded positions zeroed after each."""

    def __init__(self, config: TransformerConfig, in_width: int, width: int):
        super().__init__()
        kernel = config.stem_kernel
        self.conv = nn.Conv1d(in_width, width, kernel, padding=kernel // 2, bias=config.bias)
        self.norm = nn.LayerNorm(width, eps=config.norm_eps, bias=config.norm_has_bias)
        self.mix = nn.Conv1d(width, width, 1, bias=config.bias)

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
        """(B, L, in_width) -> (B, L, width)."""
        x = _zero_padding(self.conv(x.transpose(1, 2)).transpose(1, 2), keep)
        branch = self.mix(F.gelu(self.norm(x)).transpose(1, 2)).transpose(1, 2)
        return _zero_padding(x + branch, keep)


def _zero_padding(x: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    return x if keep is None else x * keep.unsqueeze(-1).to(x.dtype)


def masked_max_pool(x: torch.Tensor, keep: torch.Tensor | None, factor: int
                    ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(B, L, C) -> (B, ceil(L / factor), C): each bin's maximum over its real positions (a last partial bin over
    those it has), 0 for a bin without one; and the bins' real mask (any real position), None when all are real."""
    if factor == 1:
        return x, keep
    batch, length, width = x.shape
    bins = -(-length // factor)
    extra = bins * factor - length
    if keep is None and extra:
        keep = torch.ones(batch, length, dtype=torch.bool, device=x.device)
    if keep is not None:
        keep = F.pad(keep, (0, extra), value=False)
        x = F.pad(x, (0, 0, 0, extra)).masked_fill(~keep.unsqueeze(-1), float("-inf"))
    pooled = x.view(batch, bins, factor, width).amax(2)
    if keep is None:
        return pooled, None
    bin_keep = keep.view(batch, bins, factor).any(2)
    return pooled.masked_fill(~bin_keep.unsqueeze(-1), 0.0), bin_keep


class Stem(nn.Module):
    """The conv stem and its upsampling (see the module docstring)."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        widths = [config.d_model, *config.stem_widths]
        self.stages = nn.ModuleList(ConvStage(config, a, b) for a, b in zip(widths, widths[1:]))
        self.pools = tuple(config.stem_pool)
        self.factor = config.stem_factor
        last = config.stem_widths[-1]
        self.project = nn.Linear(last, config.d_model, bias=config.bias) if last != config.d_model else None
        self.skip = nn.Linear(config.stem_widths[0], config.d_model, bias=config.bias)
        self.upsample_norm = build_norm(config)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None) -> tuple[torch.Tensor, BinLayout]:
        """Embedded tokens (B, L, d_model) and their mask -> bins (B, ceil(L / factor), d_model) and the layout."""
        length = x.shape[1]
        order = keep = None
        if attention_mask is not None:
            real = attention_mask.bool()
            order = torch.argsort((~real).to(torch.int8), dim=1, stable=True)
            keep = real.gather(1, order)
            x = _zero_padding(x.gather(1, _expand(order, x)), keep)
        bin_keep, skip = keep, None
        for stage, pool in zip(self.stages, self.pools):
            x = stage(x, bin_keep)
            if skip is None:
                skip = x
            x, bin_keep = masked_max_pool(x, bin_keep, pool)
        if self.project is not None:
            x = self.project(x)
        mask = None if bin_keep is None or attention_mask is None else bin_keep.to(attention_mask.dtype)
        return x, BinLayout(order, keep, mask, skip, length, self.factor)

    def upsample(self, bins: torch.Tensor, layout: BinLayout) -> torch.Tensor:
        """Bins after the blocks (B, n_bins, d_model) -> one vector per token (B, L, d_model), the input's layout."""
        return layout.unpack(self.upsample_norm(layout.repeat(bins) + self.skip(layout.skip)))
