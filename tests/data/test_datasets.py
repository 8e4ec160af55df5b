"""Long-sequence policies, CLM packing and the length-grouped sampler, as properties."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from biotf.data.token_cache import TokenShard
from biotf.data.datasets import LengthGroupedBatchSampler, PackedBlockDataset, SequenceDataset
from biotf.errors import ConfigError, InputError
from biotf.model.loss import IGNORE_INDEX

CLS, EOS, PAD = 0, 2, 1


def make_shard(records: list[list[int]], vocab_size: int = 30) -> TokenShard:
    flat = np.array([t for r in records for t in r], np.uint16)
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in records])]).astype(np.int64)
    return TokenShard(flat, offsets, np.arange(len(records), dtype=np.int64),
                      np.bincount(flat.astype(np.int64), minlength=vocab_size))


def protein_like(lengths: list[int]) -> list[list[int]]:
    return [[CLS, *[5 + (i + j) % 20 for j in range(n)], EOS] for i, n in enumerate(lengths)]


def test_crop_keeps_specials_and_a_contiguous_window():
    records = protein_like([5, 40, 100])
    dataset = SequenceDataset(make_shard(records), max_length=16, special_ids=frozenset({CLS, EOS, PAD}))
    assert dataset.stats.cropped == 2 and dataset.stats.dropped == 0 and len(dataset) == 3
    for index in (1, 2):
        ids = dataset[index]["input_ids"]
        assert len(ids) == 16 and ids[0] == CLS and ids[-1] == EOS
        content, window = records[index][1:-1], ids[1:-1].tolist()
        assert any(content[s:s + 14] == window for s in range(len(content) - 13))
    assert dataset[0]["input_ids"].tolist() == records[0]


def test_training_crop_varies_by_epoch_and_is_reproducible():
    shard = make_shard(protein_like([500]))
    train = SequenceDataset(shard, max_length=16, special_ids=frozenset({CLS, EOS}))
    windows = []
    for epoch in range(6):
        train.set_epoch(epoch)
        windows.append(tuple(train[0]["input_ids"]))
    assert len(set(windows)) > 1
    train.set_epoch(2)
    assert tuple(train[0]["input_ids"]) == windows[2]
    validation = SequenceDataset(shard, max_length=16, training=False, special_ids=frozenset({CLS, EOS}))
    first = tuple(validation[0]["input_ids"])
    validation.set_epoch(3)
    assert tuple(validation[0]["input_ids"]) == first


def test_drop_counts_and_error_names_the_record():
    shard = make_shard(protein_like([5, 40, 6, 100]))
    dropped = SequenceDataset(shard, max_length=16, long_policy="drop")
    assert len(dropped) == 2 and dropped.stats.dropped == 2 and dropped.stats.dropped_tokens == 42 + 102
    assert [len(dropped[i]["input_ids"]) for i in range(2)] == [7, 8]
    with pytest.raises(InputError, match=r"record 2 of the input has 42 tokens, more than max_length=16"):
        SequenceDataset(shard, max_length=16, long_policy="error")
    with pytest.raises(ConfigError, match=r"allowed: crop \| drop \| error"):
        SequenceDataset(shard, max_length=16, long_policy="truncate")


@pytest.mark.parametrize("block_size", [3, 7, 16])
def test_packing_keeps_every_token_in_order(block_size):
    records = [[5, 6, 7], [8, 9], [10, 11, 12, 13, EOS], [14]]
    dataset = PackedBlockDataset(make_shard(records), block_size, separator_id=EOS, pad_id=PAD)
    stream = [5, 6, 7, EOS, 8, 9, EOS, 10, 11, 12, 13, EOS, 14, EOS]  # no second EOS after one already there
    items = [dataset[i] for i in range(len(dataset))]
    real = torch.cat([item["input_ids"][item["attention_mask"] == 1] for item in items]).tolist()
    assert real == stream
    assert len(dataset) == -(-len(stream) // block_size)
    for item in items:
        assert len(item["input_ids"]) == block_size
        assert torch.equal(item["labels"][item["attention_mask"] == 1], item["input_ids"][item["attention_mask"] == 1])
        assert (item["labels"][item["attention_mask"] == 0] == IGNORE_INDEX).all()
        assert (item["input_ids"][item["attention_mask"] == 0] == PAD).all()
    assert dataset.padding == len(dataset) * block_size - len(stream)


def test_sampler_covers_each_index_once_and_groups_lengths():
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 500, size=1003)
    sampler = LengthGroupedBatchSampler(lengths, batch_size=16, seed=1, group_batches=10)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    assert sorted(i for b in batches for i in b) == list(range(1003))
    spread = np.mean([np.ptp(lengths[b]) for b in batches if len(b) > 1])
    random_spread = np.mean([np.ptp(lengths[rng.choice(1003, 16)]) for _ in range(50)])
    assert spread < random_spread / 3
    assert batches == list(LengthGroupedBatchSampler(lengths, batch_size=16, seed=1, group_batches=10))
    sampler.set_epoch(1)
    epoch_one = list(sampler)
    assert epoch_one != batches
    sampler.set_epoch(1, start_batch=10)  # resuming mid-epoch continues the same order
    assert list(sampler) == epoch_one[10:] and len(sampler) == len(epoch_one) - 10


def test_sampler_ranks_partition_and_match_in_length():
    lengths = np.arange(1, 102)
    ranks = [list(LengthGroupedBatchSampler(lengths, 4, seed=2, num_replicas=3, rank=r)) for r in range(3)]
    assert len({len(r) for r in ranks}) == 1 and len(ranks[0]) == len(LengthGroupedBatchSampler(lengths, 4, num_replicas=3))
    assert {i for r in ranks for b in r for i in b} == set(range(101))
    dropped = list(LengthGroupedBatchSampler(lengths, 4, drop_last=True))
    assert all(len(b) == 4 for b in dropped) and len(dropped) == 25


def test_negative_seed_is_accepted_and_distinct():
    shard = make_shard(protein_like([300]))
    crops = {seed: tuple(SequenceDataset(shard, 16, seed=seed, special_ids=frozenset({CLS, EOS}))[0]["input_ids"])
             for seed in (-1, 1)}
    assert crops[-1] != crops[1]
