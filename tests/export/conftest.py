"""A tiny bidirectional protein encoder shared by the export tests (random weights, fixed seed)."""

from __future__ import annotations

import pytest
import torch

from biotf.model import Transformer, TransformerConfig
from biotf.tokenizers import AminoAcidTokenizer

# ESM-shaped (bidirectional, RoPE, LayerNorm, GELU), small enough that every test runs in well under a second.
TINY_ENCODER = dict(vocab_size=33, d_model=16, n_layers=2, n_heads=2, n_kv_heads=2, d_ff=32, max_seq_len=24,
                    causal=False, pos="rope", norm="layernorm", mlp="gelu")


@pytest.fixture(scope="session")
def tiny_encoder() -> tuple[Transformer, AminoAcidTokenizer]:
    torch.manual_seed(0)
    return Transformer(TransformerConfig(**TINY_ENCODER)).eval(), AminoAcidTokenizer()
