"""Packing (`biotf.data.packing`): first-fit decreasing bins, the sampler's batches cut back into the same rows by the
collator, every record once per epoch, resume and ranks as the length-grouped sampler, and each record masked as
it would be alone (a function of seed, epoch and record, whatever shares its row)."""

from __future__ import annotations

import numpy as np
import pytest

from biotf.conventions import IGNORE_INDEX
from biotf.data.collators import MLMCollator
from biotf.data.datasets import seeded_rng
from biotf.data.packing import (PackedBatchSampler, fill_rows, first_fit_decreasing, inference_batches,
                                next_fit_rows)
from biotf.errors import ConfigError

CAPACITY = 64


def lengths_of(n: int = 300, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(3, CAPACITY + 1, n)


def test_first_fit_decreasing_places_each_record_once_within_capacity():
    lengths = np.array([5, 60, 30, 30, 4, 34, 64, 1])
    bins = first_fit_decreasing(lengths, CAPACITY)
    assert bins == [[6], [1, 4], [5, 2], [3, 0, 7]]  # 64 | 60+4 | 34+30 | 30+5+1: 4 fits the first room left
    assert sorted(i for b in bins for i in b) == list(range(len(lengths)))


@pytest.mark.parametrize("packing", [False, True])
def test_inference_batches_hold_each_sequence_once_within_the_token_budget(packing):
    """What embed, score and predict run: rows longest first, a batch <= batch_tokens padded tokens (one row at
    least); packed rows no longer than the longest sequence, so never wider than the padded batch they replace."""
    lengths = lengths_of(200, seed=4)
    batches = list(inference_batches(lengths, 256, packing))
    rows = [row for batch in batches for row in batch]
    assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
    widths = [max(sum(lengths[i] for i in row) for row in batch) for batch in batches]
    assert all(len(batch) * width <= 256 or len(batch) == 1 for batch, width in zip(batches, widths))
    assert all(sum(lengths[i] for i in row) <= lengths.max() for row in rows)
    assert (len(rows) < len(lengths)) is packing and (max(len(row) for row in rows) > 1) is packing
    firsts = [lengths[row[0]] for row in rows]
    assert firsts == sorted(firsts, reverse=True)  # longest first
    assert list(inference_batches([], 256, packing)) == []


def test_fill_rows_lays_sequences_end_to_end_with_their_segment_ids():
    a, b, c = np.array([5, 6, 7]), np.array([8]), np.array([9, 9])
    filled = fill_rows([[a, b], [c]], pad_id=0, packed=True)
    assert filled.ids.tolist() == [[5, 6, 7, 8], [9, 9, 0, 0]]
    assert filled.segments.tolist() == [[1, 1, 1, 2], [1, 1, 0, 0]]
    assert filled.spans == [(0, 0, 3), (0, 3, 1), (1, 0, 2)]
    assert list(filled.inputs("cpu")) == ["segment_ids"]
    assert list(fill_rows([[a], [c]], 0, packed=False).inputs("cpu")) == ["attention_mask"]
    assert fill_rows([[a], [np.array([1, 2, 3])]], 0, packed=False).inputs("cpu") == {}  # no padding: SDPA's fast path


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
