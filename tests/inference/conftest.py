"""Tiny random Qwen2ForCausalLM checkpoints, saved by `transformers` with the real Qwen2.5 tokenizer beside them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiny_models import save_tiny_qwen2


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
