"""A tiny saved protein model (imported as `tiny_models`) for the command tests that need a model directory: the
ESM shape (RoPE, LayerNorm, GELU) at widths that run in milliseconds, seeded so every test module gets the same
weights."""

from __future__ import annotations

from pathlib import Path

import torch

from biotf.checkpoint import save_pretrained
from biotf.model import Transformer, TransformerConfig
from biotf.tokenizers import AminoAcidTokenizer


def save_tiny_protein_model(directory: Path, max_seq_len: int = 16, causal: bool = False) -> Path:
    """A random 16-wide, 2-layer model with the amino-acid tokenizer, saved to `directory` (returned)."""
    torch.manual_seed(0)
    config = TransformerConfig(vocab_size=33, d_model=16, n_layers=2, n_heads=2, n_kv_heads=2, d_ff=32,
                               max_seq_len=max_seq_len, causal=causal, pos="rope", norm="layernorm", mlp="gelu")
    return save_pretrained(Transformer(config), AminoAcidTokenizer(), directory)


GPT2_TEXTS = ["the quick brown fox jumps over the lazy dog", "hello world"] * 10


def save_tiny_gpt2(directory: Path, vocab_size: int = 300, **config) -> Path:
    """A random 16-wide, 2-layer GPT-2 as `transformers`' `save_pretrained` writes it, with a byte-level tokenizer of
    `vocab_size` ids beside it. GPT2Config's own bos/eos (50256) stay unless `config` sets them: what a user's
    small-vocabulary GPT-2 directory holds."""
    import transformers

    from hf_tokenizer_dirs import write_byte_level

    torch.manual_seed(0)
    settings = dict(n_embd=16, n_layer=2, n_head=2, n_positions=32) | config
    transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=vocab_size, **settings)).save_pretrained(directory)
    return write_byte_level(directory, GPT2_TEXTS, "gpt2", vocab_size=vocab_size)
