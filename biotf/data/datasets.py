"""Torch datasets over token shards, and the length-grouped batch sampler for MLM.

Every random choice (crop window, batch order, masking) is a pure function of (seed, epoch, record
index), never of hidden generator state, so a resumed run or a different worker count sees
exactly the same data as an uninterrupted one.

Long sequences follow an explicit `long_policy` (`long_policy.LongPolicy`), counted in `LongSequenceStats`; a
training crop is a random window per (seed, epoch, record), a validation crop a fixed window per record.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler

from biotf.data.token_cache import TokenShard
from biotf.data.long_policy import LongPolicy
from biotf.errors import ConfigError, check_int
from biotf.conventions import IGNORE_INDEX


@dataclass(frozen=True)
class LongSequenceStats:
    """What the long-sequence policy changed in one split."""

    records: int
    longer_than_max: int
    cropped: int
    dropped: int
    dropped_tokens: int

    def summary(self) -> str:
        return (f"{self.records} records, {self.longer_than_max} longer than max_length: "
                f"{self.cropped} cropped, {self.dropped} dropped ({self.dropped_tokens} tokens)")


def seeded_rng(*entropy: int) -> np.random.Generator:
    """A generator determined by `entropy` alone (negative seeds allowed: taken modulo 2**64)."""
    return np.random.default_rng([int(e) % 2**64 for e in entropy])


class SequenceDataset(Dataset):
    """One item per record: {"input_ids": int array <= max_length, "seed": (seed, epoch, index)}.

    `seed` lets the collator derive its masking from the item itself rather than from state.
    """

    def __init__(self, shard: TokenShard, max_length: int, long_policy: str = "crop", seed: int = 0,
                 training: bool = True, special_ids: frozenset[int] = frozenset(), name: str = "train"):
        self.policy = LongPolicy(long_policy, max_length, special_ids)
        self.shard, self.max_length, self.seed, self.training, self.epoch = shard, max_length, seed, training, 0
        lengths = shard.lengths
        too_long = lengths > max_length
        keep = self.policy.kept(lengths, lambda i: f"{name} record {int(shard.records[i]) + 1} of the input")
        self.indices = np.flatnonzero(keep)
        self.lengths = np.minimum(lengths[self.indices], max_length)
        self.stats = LongSequenceStats(
            records=len(lengths), longer_than_max=int(too_long.sum()),
            cropped=int(too_long.sum()) if long_policy == "crop" else 0,
            dropped=int(too_long.sum()) if long_policy == "drop" else 0,
            dropped_tokens=int(lengths[too_long].sum()) if long_policy == "drop" else 0)

    def set_epoch(self, epoch: int) -> None:
        """Training crops change per epoch; call it from the training loop at each epoch start."""
        self.epoch = epoch

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, item: int) -> dict:
        index = int(self.indices[item])
        ids = np.asarray(self.shard[index], dtype=np.int64)
        epoch = self.epoch if self.training else 0
        if len(ids) > self.max_length:
            ids = self.policy.crop(ids, seeded_rng(self.seed, epoch, index, 0))
        return {"input_ids": ids, "seed": (self.seed, epoch, index)}


class PackedBlockDataset(Dataset):
    """CLM: records packed end to end, `separator_id` after each, cut into `block_size` blocks.

    Nothing is dropped or cropped: documents span blocks, and the last partial block is padded
    with `pad_id` (attention 0, label -100). Labels equal input_ids (the model shifts them, as in
    HF causal LMs). The packed stream is virtual: a block is gathered from the memory-mapped shard
    on demand, so packing costs O(records) memory, not O(tokens).

    `document_masking` (`data.packing: true` for CLM): every record is `<eos> record <eos>` in the stream, and a
    block carries `segment_ids` (one id per record, 0 for padding) instead of `attention_mask`, so a record attends
    to itself alone and its positions restart. A record's segment holds both its `<eos>`s: the first is what it is
    predicted from (what `biotf generate` starts a sequence with), the last its final target; the last `<eos>`'s own
    target lies in the next segment and is not trained (`lm_targets`). Each record's logits and loss are then those
    of `<eos> record <eos>` run alone. A record cut by a block boundary continues as a new segment (positions from
    0) at the start of the next block, as a piece of its own; the cut token's target is lost, as without masking.
    """

    def __init__(self, shard: TokenShard, block_size: int, separator_id: int, pad_id: int,
                 document_masking: bool = False):
        check_int("data.max_length", block_size, 2)
        self.shard, self.block_size, self.separator_id, self.pad_id = shard, block_size, separator_id, pad_id
        self.document_masking = document_masking
        lengths = shard.lengths
        ends = shard.offsets[1:] - 1
        # A record that already ends with the separator (e.g. encode added <eos>) gets no second one.
        has_separator = (shard.tokens[ends[lengths > 0]] == separator_id) if len(ends) else np.zeros(0, bool)
        self.added = np.ones(len(lengths), np.int64)
        self.added[lengths > 0] = ~has_separator
        self.leading = int(document_masking)  # separators before each record
        self.stream_offsets = np.concatenate([[0], np.cumsum(self.leading + lengths + self.added)])
        self.stream_length = int(self.stream_offsets[-1])
        self.padding = (-self.stream_length) % block_size

    def __len__(self) -> int:
        return -(-self.stream_length // self.block_size)

    def __getitem__(self, item: int) -> dict:
        positions = np.arange(item * self.block_size, min((item + 1) * self.block_size, self.stream_length))
        record = np.searchsorted(self.stream_offsets, positions, side="right") - 1
        within = positions - self.stream_offsets[record] - self.leading
        lengths = self.shard.offsets[record + 1] - self.shard.offsets[record]
        is_separator = (within < 0) | (within >= lengths)
        source = np.where(is_separator, 0, self.shard.offsets[record] + within)
        ids = np.where(is_separator, self.separator_id, self.shard.tokens[source]).astype(np.int64)
        n_real = len(ids)
        input_ids = np.full(self.block_size, self.pad_id, np.int64)
        input_ids[:n_real] = ids
        # Records in a block are consecutive and each has a token there: ids 1, 2, ... in order, one run each.
        segments = np.zeros(self.block_size, np.int64)
        segments[:n_real] = record - record[0] + 1
        labels = np.where(segments != 0, input_ids, IGNORE_INDEX)
        if self.document_masking:
            mask = {"segment_ids": torch.from_numpy(segments)}
        else:
            mask = {"attention_mask": torch.from_numpy((segments != 0).astype(np.int64))}
        return {"input_ids": torch.from_numpy(input_ids), **mask, "labels": torch.from_numpy(labels)}


class LengthGroupedBatchSampler(Sampler[list[int]]):
    """Batches of similar-length records, so padding stays small (as HF's group_by_length).

    Indices are shuffled, cut into groups of `group_batches` batches, sorted by length within a
    group, cut into batches, and the batches shuffled again. With `num_replicas` > 1 each rank
    takes every num_replicas-th batch; the batch list is first extended by repeating its start so
    that every rank gets the same number of batches (as torch's DistributedSampler does).
    """

    def __init__(self, lengths: np.ndarray, batch_size: int, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False, group_batches: int = 50, num_replicas: int = 1, rank: int = 0):
        check_int("data.batch_size", batch_size)
        if not 0 <= rank < num_replicas:
            raise ConfigError("rank", rank, allowed=f"0..{num_replicas - 1}")
        self.lengths, self.batch_size, self.shuffle, self.seed = np.asarray(lengths), batch_size, shuffle, seed
        self.drop_last, self.group_batches, self.num_replicas, self.rank = drop_last, group_batches, num_replicas, rank
        self.epoch, self.start_batch = 0, 0

    def set_epoch(self, epoch: int, start_batch: int = 0) -> None:
        """Select the epoch's batch order; `start_batch` > 0 resumes mid-epoch after that many batches.

        The order is a pure function of (seed, epoch), so a resumed run that passes the number of
        batches already consumed continues with exactly the batches an uninterrupted run would see.
        """
        check_int("start_batch", start_batch, 0)
        self.epoch, self.start_batch = epoch, start_batch

    def _all_batches(self) -> list[np.ndarray]:
        n = len(self.lengths)
        rng = seeded_rng(self.seed, self.epoch, 1)
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        group = self.batch_size * self.group_batches
        batches = []
        for start in range(0, n, group):
            batches.extend(self._window_batches(order[start:start + group]))
        if self.drop_last and batches and len(batches[-1]) < self.batch_size:
            batches.pop()
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        if self.num_replicas > 1 and batches:
            total = -(-len(batches) // self.num_replicas) * self.num_replicas
            batches = (batches * (total // len(batches) + 1))[:total]
        return batches[self.rank::self.num_replicas][self.start_batch:]

    def _window_batches(self, members: np.ndarray) -> list[np.ndarray]:
        """One window of shuffled records cut into batches: sorted by length, `batch_size` records each."""
        members = members[np.argsort(-self.lengths[members], kind="stable")]
        return [members[i:i + self.batch_size] for i in range(0, len(members), self.batch_size)]

    def __iter__(self) -> Iterator[list[int]]:
        for batch in self._all_batches():
            yield batch.tolist()

    def __len__(self) -> int:
        n_batches = len(self.lengths) // self.batch_size if self.drop_last else -(-len(self.lengths) // self.batch_size)
        return max(0, -(-n_batches // self.num_replicas) - self.start_batch)
