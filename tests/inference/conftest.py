"""Tiny random Qwen2ForCausalLM checkpoints, saved by `transformers` with the real Qwen2.5 tokenizer beside them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import pytest

from tiny_models import save_tiny_qwen2


@pytest.fixture(scope="session")
def tied_checkpoint(tmp_path_factory, qwen_tokenizer_dir) -> Path:
    return save_tiny_qwen2(tmp_path_factory.mktemp("qwen2-tied"), qwen_tokenizer_dir, tied=True, seed=0)


@pytest.fixture(scope="session")
def untied_checkpoint(tmp_path_factory, qwen_tokenizer_dir) -> Path:
    return save_tiny_qwen2(tmp_path_factory.mktemp("qwen2-untied"), qwen_tokenizer_dir, tied=False, seed=1)


class ForGeneration(NamedTuple):
    """A checkpoint loaded for generation, as `biotf generate` loads it; unpacks as `model, tokenizer, defaults`."""

    model: Any
    tokenizer: Any
    defaults: Any


def for_generation(directory: Path) -> ForGeneration:
    from biotf.api import Model

    loaded = Model.load(directory, for_generation=True)
    return ForGeneration(loaded.network, loaded.tokenizer, loaded.generation)


@pytest.fixture(scope="session")
def tied(tied_checkpoint) -> ForGeneration:
    """The tied checkpoint loaded once by biotf: (model, tokenizer, defaults). Tests must not modify it."""
    return for_generation(tied_checkpoint)


@pytest.fixture(scope="session")
def untied(untied_checkpoint) -> ForGeneration:
    return for_generation(untied_checkpoint)
