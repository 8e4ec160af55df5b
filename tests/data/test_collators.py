"""MLM masking: rate, 80/10/10, specials untouched, k-mer spans, padding, reproducibility."""

from __future__ import annotations

import numpy as np
import pytest

from biotf.data.collators import MLMCollator, kmer_span, pad_batch
from biotf.errors import ConfigError
from biotf.model.loss import IGNORE_INDEX


def batch_of(char_tokenizer, n: int = 64, length: int = 200, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    content = len(char_tokenizer.alphabet)
    return [np.array([char_tokenizer.cls_id, *(5 + rng.integers(0, content, length - i)), char_tokenizer.eos_id])
            for i in range(n)]


def test_rate_and_80_10_10(char_tokenizer):
    sequences = batch_of(char_tokenizer)
    collator = MLMCollator(char_tokenizer, seed=0)
    out = collator(sequences)
    ids, _ = pad_batch(sequences, char_tokenizer.pad_id)
    selected = out["labels"].numpy() != IGNORE_INDEX
    content = (ids >= 5).sum()
    assert 0.13 < selected.sum() / content < 0.17
    assert (out["labels"].numpy()[selected] == ids[selected]).all()
    corrupted = out["input_ids"].numpy()[selected]
    masked = corrupted == char_tokenizer.mask_id
    kept = corrupted == ids[selected]
    assert 0.76 < masked.mean() < 0.84
    assert 0.07 < kept.mean() < 0.13  # 10% keep, plus random draws that hit the same id (1/20 of 10%)
    assert (corrupted[~masked] >= 5).all()  # random replacements are never special tokens
    unselected = ~selected
    assert (out["input_ids"].numpy()[unselected] == ids[unselected]).all()


def test_specials_and_padding_never_masked(char_tokenizer):
    sequences = [np.array([0, 5, 2]), np.array([0, 6, 7, 8, 9, 2]), np.array([0, 2])]
    out = MLMCollator(char_tokenizer, mask_probability=0.99)(sequences)
    labels, mask = out["labels"].numpy(), out["attention_mask"].numpy()
    assert mask.tolist() == [[1, 1, 1, 0, 0, 0], [1] * 6, [1, 1, 0, 0, 0, 0]]
    assert (out["input_ids"].numpy()[mask == 0] == char_tokenizer.pad_id).all()
    specials = np.isin(pad_batch(sequences, 1)[0], [0, 1, 2])
    assert (labels[specials] == IGNORE_INDEX).all()
    assert (labels[0] != IGNORE_INDEX).sum() == 1  # even a one-residue sequence contributes


def test_every_sequence_gets_a_masked_token(char_tokenizer):
    sequences = [np.array([0, 5, 6, 2])] * 200
    labels = MLMCollator(char_tokenizer, mask_probability=0.01)(sequences)["labels"].numpy()
    assert ((labels != IGNORE_INDEX).sum(axis=1) >= 1).all()


@pytest.mark.parametrize("k, stride", [(6, 1), (3, 1), (5, 2), (6, 6)])
def test_overlapping_kmers_mask_every_kmer_sharing_the_base(make_char_tokenizer, k, stride):
    tokenizer = make_char_tokenizer(k=k, stride=stride)
    before, after = kmer_span(k, stride)
    for anchor in range(12):
        centre = anchor * stride + k // 2
        sharing = [j for j in range(40) if j * stride <= centre < j * stride + k]
        assert sharing == list(range(anchor - before, anchor + after + 1))[-len(sharing):] or anchor < before
    sequences = batch_of(tokenizer, n=32, length=300)
    collator = MLMCollator(tokenizer, seed=1)
    labels = collator(sequences)["labels"].numpy()
    selected = labels != IGNORE_INDEX
    span = before + after + 1
    rate = selected.sum() / sum(len(s) - 2 for s in sequences)
    assert 0.08 < rate < 0.17  # spans overlap a little, so slightly under 15%
    # Away from the sequence ends (where fewer k-mers contain a base) masked runs are whole spans or longer.
    for row, sequence in zip(selected, sequences):
        padded = np.concatenate([[False], row[:len(sequence)], [False]]).astype(int)
        starts, ends = np.flatnonzero(np.diff(padded) == 1), np.flatnonzero(np.diff(padded) == -1)
        for start, end in zip(starts, ends):
            if start > 1 + before and end < len(sequence) - 1 - after:
                assert end - start >= span


def test_seeded_items_mask_reproducibly(char_tokenizer):
    sequences = batch_of(char_tokenizer, n=4)
    items = [{"input_ids": s, "seed": (0, 1, i)} for i, s in enumerate(sequences)]
    collator = MLMCollator(char_tokenizer)
    first, second = collator(items), MLMCollator(char_tokenizer)(items)
    assert all(np.array_equal(first[k], second[k]) for k in first)
    other = collator([{**item, "seed": (0, 2, item["seed"][2])} for item in items])
    assert not np.array_equal(first["labels"], other["labels"])


def test_pad_to_multiple_and_refusals(char_tokenizer, make_char_tokenizer):
    out = MLMCollator(char_tokenizer, pad_to_multiple_of=8)([np.array([0, 5, 6, 2])])
    assert out["input_ids"].shape == (1, 8) and out["input_ids"].dtype.is_floating_point is False
    with pytest.raises(ConfigError, match="mask_probability"):
        MLMCollator(char_tokenizer, mask_probability=0)
    no_mask = make_char_tokenizer()
    no_mask.mask_id = None
    with pytest.raises(ConfigError, match="needs a tokenizer with <mask>"):
        MLMCollator(no_mask)
