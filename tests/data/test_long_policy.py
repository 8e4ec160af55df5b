"""One long-sequence policy for pretraining's datasets and for fine-tuning / `biotf predict` (`encode_for_task`):
the same records are kept, a crop keeps the special tokens and a contiguous window, "error" names the record."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from biotf.data.token_cache import TokenShard
from biotf.data.datasets import SequenceDataset
from biotf.data.long_policy import CROPPED, DROPPED, LongPolicy
from biotf.errors import ConfigError, InputError
from biotf.data.long_policy import encode_for_task
from biotf.tokenizers import build_tokenizer

CLS, EOS = 0, 2
SPECIALS = frozenset({CLS, EOS})


def records(lengths: list[int]) -> list[np.ndarray]:
    return [np.array([CLS, *(5 + (i + j) % 20 for j in range(n)), EOS]) for i, n in enumerate(lengths)]


def shard(rows: list[np.ndarray]) -> TokenShard:
    flat = np.concatenate(rows).astype(np.uint16)
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
    return TokenShard(flat, offsets, np.arange(len(rows), dtype=np.int64), np.bincount(flat, minlength=30))


@pytest.mark.parametrize("name", ["crop", "drop"])
def test_datasets_and_single_records_keep_the_same_records(name):
    rows = records([5, 40, 14, 15, 100, 3])  # 16 and 17 tokens straddle max_length=16
    dataset = SequenceDataset(shard(rows), max_length=16, long_policy=name, special_ids=SPECIALS, training=False)
    policy, counts = LongPolicy(name, 16, SPECIALS), Counter()
    applied = [policy.apply(r, f"r{i}", counts) for i, r in enumerate(rows)]
    assert dataset.indices.tolist() == [i for i, ids in enumerate(applied) if ids is not None]
    assert counts == Counter({CROPPED if name == "crop" else DROPPED: 3})
    assert dataset.stats.longer_than_max == 3
    for item, index in enumerate(dataset.indices):
        assert len(dataset[item]["input_ids"]) == len(applied[index]) <= 16


def test_a_crop_keeps_the_specials_around_a_contiguous_window_the_first_one_without_a_generator():
    ids = records([100])[0]
    policy = LongPolicy("crop", 16, SPECIALS)
    first = policy.crop(ids)
    assert first.tolist() == [*ids[:15], EOS]
    rng = np.random.default_rng(0)
    for _ in range(20):
        window = policy.crop(ids, rng)
        assert len(window) == 16 and window[0] == CLS and window[-1] == EOS
        inner = window[1:-1]
        assert any(np.array_equal(ids[s:s + 14], inner) for s in range(1, len(ids) - 14))
    no_specials = LongPolicy("crop", 16)  # a record without special tokens: a window of max_length content tokens
    assert no_specials.crop(ids).tolist() == ids[:16].tolist()


def test_error_names_the_record_in_either_path():
    rows = records([5, 40])
    with pytest.raises(InputError, match=r"train record 2 of the input has 42 tokens, more than max_length=16"):
        SequenceDataset(shard(rows), max_length=16, long_policy="error", special_ids=SPECIALS)
    with pytest.raises(InputError, match=r"record 'p2' has 42 tokens, more than max_length=16"):
        LongPolicy("error", 16, SPECIALS).apply(rows[1], "p2", Counter())
    with pytest.raises(ConfigError, match=r"data.long_policy.*allowed: crop \| drop \| error"):
        LongPolicy("truncate", 16)


def test_encode_for_task_follows_the_policy():
    tokenizer = build_tokenizer({"kind": "protein"})
    sequence = "MKTAYIAKQRQISFVKSHFSRQ"  # 22 residues: 24 tokens with <cls> and <eos>
    whole = tokenizer.encode(sequence)
    counts = Counter()
    cropped = encode_for_task(tokenizer, sequence, "p", 10, "crop", counts)
    assert cropped.tolist() == [*whole[:9], whole[-1]] and whole[-1] in tokenizer.special_ids
    assert encode_for_task(tokenizer, sequence, "p", 10, "drop", counts) is None
    assert encode_for_task(tokenizer, sequence, "p", 24, "error", counts).tolist() == whole  # fits: unchanged
    assert counts == Counter({CROPPED: 1, DROPPED: 1})
    with pytest.raises(InputError, match="record 'p' has 24 tokens"):
        encode_for_task(tokenizer, sequence, "p", 10, "error", counts)
