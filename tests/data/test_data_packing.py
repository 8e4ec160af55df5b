"""Packing (`biotf.data.packing`): first-fit decreasing bins, the sampler's batches cut back into the same rows by the
collator, every record once per epoch, resume and ranks as the length-grouped sampler, and each record masked as
it would be alone (a function of seed, epoch and record, whatever shares its row)."""

from __future__ import annotations

import numpy as np
import pytest

from biotf.conventions import IGNORE_INDEX
from biotf.data.collators import MLMCollator
from biotf.data.datasets import seeded_rng
from biotf.data.packing import PackedBatchSampler, first_fit_decreasing, next_fit_rows
from biotf.errors import ConfigError

CAPACITY = 64


def lengths_of(n: int = 300, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(3, CAPACITY + 1, n)


def test_first_fit_decreasing_places_each_record_once_within_capacity():
    lengths = np.array([5, 60, 30, 30, 4, 34, 64, 1])
    bins = first_fit_decreasing(lengths, CAPACITY)
    assert bins == [[6], [1, 4], [5, 2], [3, 0, 7]]  # 64 | 60+4 | 34+30 | 30+5+1: 4 fits the first room left
    assert sorted(i for b in bins for i in b) == list(range(len(lengths)))


def test_the_collators_next_fit_cuts_every_batch_into_the_samplers_rows():
    lengths = lengths_of()
    sampler = PackedBatchSampler(lengths, 4, CAPACITY, seed=3, group_batches=10)
    seen = []
    for batch in sampler:
        rows = next_fit_rows(lengths[batch].tolist(), CAPACITY)
        assert len(rows) <= 4
        assert all(sum(lengths[batch][row]) <= CAPACITY for row in rows)
        seen.extend(batch)
    assert sorted(seen) == list(range(len(lengths)))  # every record once per epoch
    assert len(sampler) == len(list(sampler))
    padded_rows = -(-len(lengths) // 4) * 4  # rows a one-record-per-row batch would need, each of CAPACITY
    assert sampler.padding_fraction() < 1 - lengths.sum() / (padded_rows * CAPACITY) - 0.3


def test_batches_are_a_function_of_seed_and_epoch_and_resume_mid_epoch():
    lengths = lengths_of()
    sampler = PackedBatchSampler(lengths, 4, CAPACITY, seed=1)
    sampler.set_epoch(2)
    whole = list(sampler)
    fresh = PackedBatchSampler(lengths, 4, CAPACITY, seed=1)
    fresh.set_epoch(2)
    assert list(fresh) == whole
    again = PackedBatchSampler(lengths, 4, CAPACITY, seed=1)
    again.set_epoch(2, start_batch=5)
    assert list(again) == whole[5:] and len(again) == len(whole) - 5
    other = PackedBatchSampler(lengths, 4, CAPACITY, seed=1)
    other.set_epoch(3)
    assert list(other) != whole


def test_ranks_get_as_many_batches_each():
    lengths = lengths_of(101)
    ranks = [list(PackedBatchSampler(lengths, 3, CAPACITY, num_replicas=2, rank=r)) for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) == len(PackedBatchSampler(lengths, 3, CAPACITY, num_replicas=2))


def test_a_record_longer_than_a_row_is_refused():
    with pytest.raises(ConfigError, match="data.max_length"):
        PackedBatchSampler(np.array([10, 70]), 2, CAPACITY)


def items_of(char_tokenizer, n: int, epoch: int = 0) -> list[dict]:
    rng = np.random.default_rng(5)
    return [{"input_ids": np.array([char_tokenizer.cls_id, *(5 + rng.integers(0, 20, rng.integers(5, 40))),
                                    char_tokenizer.eos_id]), "seed": (7, epoch, index)} for index in range(n)]


def test_each_packed_record_is_masked_as_alone_whatever_shares_its_row(char_tokenizer):
    collator = MLMCollator(char_tokenizer, pack_length=CAPACITY)
    items = items_of(char_tokenizer, 12)
    batch = collator(items)
    ids, segments, labels = (batch[key].numpy() for key in ("input_ids", "segment_ids", "labels"))
    rows = next_fit_rows([len(item["input_ids"]) for item in items], CAPACITY)
    assert ids.shape[0] == len(rows) and ids.shape[1] <= CAPACITY
    alone = MLMCollator(char_tokenizer)
    for row, members in enumerate(rows):
        start = 0
        for number, index in enumerate(members, 1):
            sequence = items[index]["input_ids"][None]
            stop = start + sequence.shape[1]
            expected_ids, expected_labels = alone.mask(sequence, np.ones_like(sequence), seeded_rng(7, 0, index, 2))
            assert (segments[row, start:stop] == number).all()
            assert (ids[row, start:stop] == expected_ids[0]).all()
            assert (labels[row, start:stop] == expected_labels[0]).all()
            start = stop
        assert (segments[row, start:] == 0).all() and (labels[row, start:] == IGNORE_INDEX).all()
        assert (ids[row, start:] == char_tokenizer.pad_id).all()
    # Another batch mate, another row: the record's masking stays.
    moved = collator([items[3], items[0]])
    first = len(items[3]["input_ids"])
    assert (moved["labels"].numpy()[0, first:first + len(items[0]["input_ids"])]
            == alone.mask(items[0]["input_ids"][None], np.ones((1, len(items[0]["input_ids"]))),
                          seeded_rng(7, 0, 0, 2))[1][0]).all()
