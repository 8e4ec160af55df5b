"""Contacts from attention (Rao et al. 2020, "Transformer protein language models are unsupervised structure
learners"): every layer x head attention map, restricted to residue pairs, is symmetrised (A + A^T) and
corrected by the average product (APC: F - F_i. F_.j / F_..), and a logistic regression over the n_layers x
n_heads maps gives each residue pair's contact probability. ESM-2 checkpoints ship that regression
(`contact_head.regression`, `ContactHead`, which a Transformer holds when `contact_head: true`); HF's
`EsmForMaskedLM.predict_contacts` applies it, and so do `predict_contacts` and the method
`Transformer.predict_contacts`.
The functions take the transformer without importing its module, which imports this one for the head.

The maps are streamed: each layer's are reduced into the regression's sum before the next layer runs, so memory
holds one layer's batch x heads x T x T float32 maps (prediction reduces them in place, `weighted_features`; fitting
needs every head's features, `contact_features`, a few temporaries of that size), never n_layers'.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from torch import nn

from biotf.errors import ConfigError
from biotf.model.config import TransformerConfig

class ContactHead(nn.Module):
    """The regression: one weight per (layer, head) map, layer-major as HF and fair-esm order them, and a bias."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.n_layers, self.n_heads = config.n_layers, config.n_heads
        self.regression = nn.Linear(config.n_layers * config.n_heads, 1)


def symmetrise(maps: torch.Tensor) -> torch.Tensor:
    """A + A^T over the last two dimensions (HF's and fair-esm's `symmetrize`: a sum, not a mean)."""
    return maps + maps.transpose(-1, -2)


def average_product_correct(maps: torch.Tensor) -> torch.Tensor:
    """F - F_i. F_.j / F_.. per map (the last two dimensions): removes what every position shares (Dunn et al. 2008).
    Rows and columns that are zero (padding, special tokens) add nothing to the sums and stay zero."""
    return maps - maps.sum(-1, keepdim=True) * maps.sum(-2, keepdim=True) / maps.sum((-1, -2), keepdim=True)


def esm_residues(attention_mask: torch.Tensor) -> torch.Tensor:
    """The residue positions of an ESM-tokenised batch (padded on either side): real tokens but each row's first and
    last (<cls> and <eos>), as HF's contact head removes them."""
    mask = attention_mask.bool()
    rank = mask.long().cumsum(-1)  # 1 at the first real token, the row's real length at its last
    return mask & (rank > 1) & (rank < mask.sum(-1, keepdim=True))


def _residue_pairs(residue_mask: torch.Tensor) -> torch.Tensor:
    """(batch, 1, T, T) float32: 1 where both positions are residues."""
    keep = residue_mask.to(torch.float32)
    return (keep[:, :, None] * keep[:, None, :])[:, None]


def weighted_features(maps: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """sum_h weight_h APC(symmetrise(maps_h)): (batch, T, T) from one layer's (batch, heads, T, T) maps, without the
    per-head temporaries of `contact_features` (the head's sum of them, computed with one map-sized tensor, `maps`).
    Symmetrising and the weighted sum are linear, so they commute; APC's correction of head h is the outer product
    of S_h's row sums over its total (S_h = A_h + A_h^T is symmetric: row sums = column sums = A_h's row + column
    sums), so the weighted corrections are one (T, heads) x (heads, T) product."""
    summed = torch.einsum("bhij,h->bij", maps, weight)
    sums = maps.sum(-1) + maps.sum(-2)
    scaled = sums * (weight[None, :, None] / sums.sum(-1, keepdim=True))
    return summed + summed.transpose(-1, -2) - torch.einsum("bhi,bhj->bij", scaled, sums)


def contact_features(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                     residue_mask: torch.Tensor) -> Iterator[torch.Tensor]:
    """Per layer, its (batch, heads, T, T) float32 APC(symmetrised attention) maps over residue pairs (0 at every
    pair with a non-residue position), yielded one layer at a time."""
    pairs = _residue_pairs(residue_mask)
    for attention in model.attention_maps(input_ids, attention_mask):
        features = average_product_correct(symmetrise(attention * pairs))
        del attention  # not alive while the next layer runs
        yield features


@torch.no_grad()
def predict_contacts(model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                     residue_mask: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Each sequence's (L, L) float32 contact probabilities over its L residues (`residue_mask`: which positions
    are residues; default `esm_residues`, ESM's <cls> ... <eos> layout), from the model's contact head."""
    head = model.contact_head
    if head is None:
        raise ConfigError("contact_head", False, "true", reason="this model has no contact head (ESM-2 checkpoints "
                                                                "ship one; other models need one fitted first)")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if residue_mask is None:
        residue_mask = esm_residues(attention_mask)
    weight = head.regression.weight.float().view(head.n_layers, head.n_heads)
    logits = torch.zeros(input_ids.shape[0], input_ids.shape[1], input_ids.shape[1], device=input_ids.device)
    pairs = _residue_pairs(residue_mask)
    layers = iter(weight)  # not enumerate(): its reused result tuple would keep a layer's maps alive into the next
    for attention in model.attention_maps(input_ids, attention_mask):
        logits += weighted_features(attention.mul_(pairs), next(layers))
        del attention  # not alive while the next layer runs
    probabilities = torch.sigmoid(logits + head.regression.bias.float())
    return [row[keep][:, keep] for row, keep in zip(probabilities, residue_mask.bool())]


def attach_contact_head(model: nn.Module, weight: torch.Tensor, bias: float) -> None:
    """Give `model` (in place) a contact head with these regression numbers, `weight` layer-major (n_layers x n_heads
    values, as `ContactHead` orders them), and `contact_head: true` in its config, so that an export holds both."""
    config = model.config.replace(contact_head=True)
    head = ContactHead(config).to(device=model.device)
    with torch.no_grad():
        head.regression.weight.copy_(torch.as_tensor(weight, dtype=torch.float32).view_as(head.regression.weight))
        head.regression.bias.fill_(float(bias))
    model.config, model.contact_head = config, head
