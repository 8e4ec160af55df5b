"""The tensor names the BERT-style encoders share (BERT, RoBERTa, ESM), as one table that serves reading and writing.

Their blocks name attention and MLP alike (`encoder.layer.{i}.attention.self.query`, `...attention.output.dense`,
`...intermediate.dense`, `...output.dense`); only the two norms differ by where they sit (Post-LN BERT:
`attention.output.LayerNorm`, `output.LayerNorm`; Pre-LN ESM: `attention.LayerNorm`, `LayerNorm`). A family lists
its tensors as `Names`: biotf name -> HF name for the tensors that are renamed only, and biotf's fused `attn.qkv`
-> HF's query, key, value. `read` and `write` apply one table in either direction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import torch

from biotf.errors import CheckpointError

QKV = ("query", "key", "value")
# Old checkpoints (TF-converted BERTs, transformers' own ESM norms) name a LayerNorm's gain and bias gamma and beta.
LEGACY_NORM_NAMES = {".weight": ".gamma", ".bias": ".beta"}


class Names(NamedTuple):
    """biotf name -> HF name (`renamed`), and biotf's fused tensors (q/k/v; ESM C's gate/up too) -> their HF parts
    (`fused`), stacked in that order."""

    renamed: dict[str, str]
    fused: dict[str, tuple[str, ...]]


def linear(ours: str, hf: str) -> dict[str, str]:
    """A layer's weight and bias (a Linear, or a LayerNorm under its current names)."""
    return {f"{ours}.{kind}": f"{hf}.{kind}" for kind in ("weight", "bias")}


def block_names(n_layers: int, trunk: str, attn_norm: str, mlp_norm: str) -> Names:
    """Every block's tensors, under `trunk` ("bert.", "esm.", ""...); `attn_norm` / `mlp_norm`: the HF names (within
    a layer) of the norms biotf calls attn_norm / mlp_norm."""
    renamed: dict[str, str] = {}
    fused: dict[str, tuple[str, ...]] = {}
    for i in range(n_layers):
        hf, ours = f"{trunk}encoder.layer.{i}.", f"blocks.{i}."
        for kind in ("weight", "bias"):
            fused[f"{ours}attn.qkv.{kind}"] = tuple(f"{hf}attention.self.{part}.{kind}" for part in QKV)
        for biotf_name, hf_name in (("attn.out", "attention.output.dense"), ("attn_norm", attn_norm),
                                    ("mlp.up", "intermediate.dense"), ("mlp.down", "output.dense"),
                                    ("mlp_norm", mlp_norm)):
            renamed.update(linear(ours + biotf_name, hf + hf_name))
    return Names(renamed, fused)


def read(weights: Mapping[str, torch.Tensor], names: Names, family: str) -> dict[str, torch.Tensor]:
    """A biotf state dict from HF `weights` (each tensor looked up once; a norm's gamma / beta read as its weight /
    bias), naming the first tensor the checkpoint lacks."""

    def take(hf: str) -> torch.Tensor:
        if hf not in weights:
            legacy = next((hf.removesuffix(new) + old for new, old in LEGACY_NORM_NAMES.items() if hf.endswith(new)),
                          None)
            if legacy is None or legacy not in weights:
                raise CheckpointError(f"{family} checkpoint lacks tensor {hf!r}")
            hf = legacy
        return weights[hf]

    state = {ours: take(hf) for ours, hf in names.renamed.items()}
    state.update({ours: torch.cat([take(hf) for hf in parts]) for ours, parts in names.fused.items()})
    return state


def write(state: Mapping[str, torch.Tensor], names: Names) -> dict[str, torch.Tensor]:
    """HF tensors from a biotf state dict (the inverse of `read`; the parts are equal row blocks: q, k, v of qkv)."""
    out = {hf: state[ours] for ours, hf in names.renamed.items()}
    for ours, parts in names.fused.items():
        out.update(zip(parts, state[ours].chunk(len(parts))))
    return out
