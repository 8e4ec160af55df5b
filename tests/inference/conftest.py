"""Tiny random Qwen2ForCausalLM checkpoints, saved by `transformers` with the real Qwen2.5 tokenizer beside them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

# Qwen2.5-0.5B-Instruct's generation_config.json (eos <|im_end|> and <|endoftext|>), sampling off so that the
# defaults are greedy; the sampling fields stay to be read.
GENERATION_CONFIG = {"bos_token_id": 151643, "pad_token_id": 151643, "do_sample": False,
                     "eos_token_id": [151645, 151643], "repetition_penalty": 1.1, "temperature": 0.7,
                     "top_p": 0.8, "top_k": 20}


def save_tiny_qwen2(directory: Path, tokenizer_dir: Path, tied: bool, seed: int = 0) -> Path:
    """A 2-layer Qwen2 with Qwen2.5's vocabulary and random weights (wide enough that greedy has no near-ties)."""
    transformers = pytest.importorskip("transformers")
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


@pytest.fixture(scope="session")
def tied_checkpoint(tmp_path_factory, qwen_tokenizer_dir) -> Path:
    return save_tiny_qwen2(tmp_path_factory.mktemp("qwen2-tied"), qwen_tokenizer_dir, tied=True, seed=0)


@pytest.fixture(scope="session")
def untied_checkpoint(tmp_path_factory, qwen_tokenizer_dir) -> Path:
    return save_tiny_qwen2(tmp_path_factory.mktemp("qwen2-untied"), qwen_tokenizer_dir, tied=False, seed=1)


@pytest.fixture(scope="session")
def tied(tied_checkpoint):
    """The tied checkpoint loaded once by biotf: (model, tokenizer, defaults). Tests must not modify it."""
    from biotf.inference.pretrained import load_hf_checkpoint

    return load_hf_checkpoint(tied_checkpoint)


@pytest.fixture(scope="session")
def untied(untied_checkpoint):
    from biotf.inference.pretrained import load_hf_checkpoint

    return load_hf_checkpoint(untied_checkpoint)
