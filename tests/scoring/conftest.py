"""Tiny random models for the scoring tests (`scoring_helpers.tiny_model`)."""

from __future__ import annotations

import pytest
from scoring_helpers import tiny_model

from biotf.tokenizers import AminoAcidTokenizer, KmerTokenizer

@pytest.fixture(scope="session")
def protein_mlm():
    return tiny_model(33, causal=False), AminoAcidTokenizer()


@pytest.fixture(scope="session")
def protein_clm():
    return tiny_model(33, causal=True, seed=1), AminoAcidTokenizer()


@pytest.fixture(scope="session")
def kmer_mlm():
    """Overlapping 3-mers (DNABERT-style): one base change re-tokenizes the three tokens that cover it."""
    tokenizer = KmerTokenizer(k=3, stride=1)
    return tiny_model(tokenizer.vocab_size, causal=False, seed=2), tokenizer


@pytest.fixture(scope="session")
def saved_protein_mlm(tmp_path_factory, protein_mlm):
    from biotf.checkpoint import save_pretrained

    return save_pretrained(*protein_mlm, tmp_path_factory.mktemp("scoring") / "protein_mlm")
