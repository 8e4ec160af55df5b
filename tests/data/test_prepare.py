"""prepare_dataset end to end: the entry point training uses, through a torch DataLoader."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from biotf.data import LengthGroupedBatchSampler, MLMCollator, prepare_dataset, unigram_cross_entropy
from biotf.errors import ConfigError


@pytest.fixture
def fasta(tmp_path, write_fasta):
    residues = "ACDEFGHIKLMNPQRSTVWY"
    rng = np.random.default_rng(0)
    records = {f"r{i}": "".join(rng.choice(list(residues), size=int(rng.integers(10, 120)), p=None)) for i in range(300)}
    return write_fasta(tmp_path / "p.fasta", records)


def test_mlm_batches_from_a_file(fasta, tmp_path, char_tokenizer):
    prepared = prepare_dataset(fasta, char_tokenizer, tmp_path / "cache", validation_fraction=0.1, max_length=64)
    assert len(prepared.train) + len(prepared.validation) == 300
    assert prepared.long_sequences["train"].cropped > 0
    assert "cropped" in prepared.summary() and "(built)" in prepared.summary()
    sampler = LengthGroupedBatchSampler(prepared.train.lengths, batch_size=16, seed=0)
    loader = DataLoader(prepared.train, batch_sampler=sampler, collate_fn=MLMCollator(char_tokenizer))
    batches = list(loader)
    assert sum(len(b["input_ids"]) for b in batches) == len(prepared.train)
    assert max(b["input_ids"].shape[1] for b in batches) == 64
    assert all((b["labels"] != -100).any() for b in batches)


def test_clm_blocks(fasta, tmp_path, char_tokenizer):
    prepared = prepare_dataset(fasta, char_tokenizer, tmp_path / "cache", max_length=32, objective="clm")
    shard = prepared.shards["train"]
    assert shard[0][0] != char_tokenizer.cls_id  # CLM encodes without <cls>/<eos>; <eos> separates
    expected_blocks = math.ceil((shard.n_tokens + len(shard)) / 32)
    assert len(prepared.train) == expected_blocks
    batch = next(iter(DataLoader(prepared.train, batch_size=4)))
    assert batch["input_ids"].shape == (4, 32) and batch["labels"].dtype == torch.int64


def test_unigram_baseline(fasta, tmp_path, char_tokenizer):
    prepared = prepare_dataset(fasta, char_tokenizer, tmp_path / "cache", validation_fraction=0.2)
    train, validation = prepared.shards["train"].counts, prepared.shards["validation"].counts
    content = np.setdiff1d(np.arange(char_tokenizer.vocab_size), list(char_tokenizer.special_ids))  # <unk> stays
    p = (train[content] + 1) / (train[content] + 1).sum()
    q = validation[content] / validation[content].sum()
    assert prepared.unigram_baseline() == pytest.approx(-(q * np.log(p)).sum())
    assert prepared.unigram_baseline() == pytest.approx(math.log(20), rel=0.02)  # uniform residues (+ an unseen <unk>)
    assert unigram_cross_entropy(np.array([3, 1]), np.array([3, 1])) == pytest.approx(
        -(0.75 * math.log(4 / 6) + 0.25 * math.log(2 / 6)))


def test_refusals(fasta, tmp_path, char_tokenizer, make_char_tokenizer):
    with pytest.raises(ConfigError, match="allowed: mlm, clm"):
        prepare_dataset(fasta, char_tokenizer, tmp_path, objective="lm")
    no_eos = make_char_tokenizer()
    no_eos.eos_id = None
    with pytest.raises(ConfigError, match="<eos>"):
        prepare_dataset(fasta, no_eos, tmp_path, objective="clm")
