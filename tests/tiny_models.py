"""Tiny saved models (imported as `tiny_models`) for the tests that need a model directory: a biotf protein model of
the ESM shape (RoPE, LayerNorm, GELU), a GPT-2 and a Qwen2 as `transformers` saves them, at widths that run in
milliseconds, seeded so every test module gets the same weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from biotf.checkpoint import save_pretrained
from biotf.model import Transformer, TransformerConfig
from biotf.tokenizers import AminoAcidTokenizer


def save_tiny_protein_model(directory: Path, max_seq_len: int = 16, causal: bool = False, pos: str = "rope") -> Path:
    """A random 16-wide, 2-layer model with the amino-acid tokenizer, saved to `directory` (returned)."""
    torch.manual_seed(0)
    config = TransformerConfig(vocab_size=33, d_model=16, n_layers=2, n_heads=2, n_kv_heads=2, d_ff=32,
                               max_seq_len=max_seq_len, causal=causal, pos=pos, norm="layernorm", mlp="gelu")
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


# Qwen2.5-0.5B-Instruct's generation_config.json (eos <|im_end|> and <|endoftext|>), sampling off so that the
# defaults are greedy; the sampling fields stay to be read.
GENERATION_CONFIG = {"bos_token_id": 151643, "pad_token_id": 151643, "do_sample": False,
                     "eos_token_id": [151645, 151643], "repetition_penalty": 1.1, "temperature": 0.7,
                     "top_p": 0.8, "top_k": 20}


def save_tiny_qwen2(directory: Path, tokenizer_dir: Path, tied: bool, seed: int = 0) -> Path:
    """A 2-layer Qwen2 with Qwen2.5's vocabulary and random weights (wide enough that greedy has no near-ties)."""
    import transformers

    torch.manual_seed(seed)
    config = transformers.Qwen2Config(
        vocab_size=151936, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=tied,
        max_position_embeddings=128, initializer_range=0.5, bos_token_id=151643, eos_token_id=151643)
    model = transformers.Qwen2ForCausalLM._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    with torch.no_grad():  # HF initialises biases to 0 and norm gains to 1: randomise them so that they count
        for name, parameter in model.named_parameters():
            if name.endswith(".bias") or "norm" in name:
                parameter.normal_(1.0 if "norm" in name else 0.0, 0.2)
    model.save_pretrained(directory)
    for item in tokenizer_dir.iterdir():
        shutil.copy(item, directory / item.name)
    (directory / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG))
    return directory
