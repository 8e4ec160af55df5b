"""Tiny random `transformers` ESM C models (`EsmcForMaskedLM`, `EsmcModel`, the classifiers), saved as a hub
directory is: config.json + model.safetensors from `save_pretrained`, and EsmcTokenizer's tokenizer files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


def build_random_esmc(architecture: str = "EsmcForMaskedLM", seed: int = 0, n_layers: int = 3, bias: bool = False,
                      weight_std: float = 0.1):
    """3 layers, 4 heads, d 32, ESM C's 64-row embedding (its tokenizer has 33 tokens, <pad> 1, <mask> 32). HF
    initialises biases to 0, norm gains to 1 and weights at std 0.02 (near-uniform attention): weights are drawn at
    `weight_std` and norms and biases randomised, so that each counts."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(seed)
    config = transformers.EsmcConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=n_layers,
                                     num_attention_heads=4, max_position_embeddings=128, attention_bias=bias,
                                     mlp_bias=bias, num_labels=3)
    model = getattr(transformers, architecture)._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            is_norm = "norm" in name
            if name.endswith("bias") or is_norm:
                parameter.normal_(1.0 if is_norm and name.endswith("weight") else 0.0, 0.2)
            else:
                parameter.normal_(0.0, weight_std)
    return model.eval()


def save_esmc_directory(model, directory: Path) -> Path:
    """`model` and `transformers`' EsmcTokenizer saved into `directory`."""
    transformers = pytest.importorskip("transformers")
    model.save_pretrained(directory)
    transformers.EsmcTokenizer().save_pretrained(directory)
    return directory
