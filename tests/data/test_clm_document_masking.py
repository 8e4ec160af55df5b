"""Document-masked CLM blocks (`PackedBlockDataset(document_masking=True)`, `data.packing: true` for CLM): every
record is `<eos> record <eos>` in the stream, one segment per record in each block, a record cut by a block boundary
a new segment in the next; each segment's logits and loss equal the segment run alone (float32, 1e-5), for every
position kind, and a batch of blocks has the loss of its segments as a padded batch (the token-weighted mean)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from biotf.conventions import IGNORE_INDEX
from biotf.data.token_cache import TokenShard
from biotf.data.datasets import PackedBlockDataset
from biotf.model import Transformer, TransformerConfig
from biotf.model.loss import language_model_loss

TOLERANCE = 1e-5
EOS, PAD = 2, 1
BLOCK = 16


def make_shard(records: list[list[int]], vocab_size: int = 30) -> TokenShard:
    flat = np.array([t for r in records for t in r], np.uint16)
    offsets = np.concatenate([[0], np.cumsum([len(r) for r in records])]).astype(np.int64)
    return TokenShard(flat, offsets, np.arange(len(records), dtype=np.int64),
                      np.bincount(flat.astype(np.int64), minlength=vocab_size))


def random_records(lengths: list[int], seed: int = 1) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(4, 30, n).tolist() for n in lengths]


# Short records several to a block, one cut by a boundary, one longer than a block, an empty one, one already
# ending with <eos> (no second one added).
RECORDS = random_records([3, 5, 9, 1, 21, 0, 4, 6]) + [[7, 8, EOS]]


def blocks(records: list[list[int]] = RECORDS) -> dict[str, torch.Tensor]:
    dataset = PackedBlockDataset(make_shard(records), BLOCK, separator_id=EOS, pad_id=PAD, document_masking=True)
    items = [dataset[i] for i in range(len(dataset))]
    return {key: torch.stack([item[key] for item in items]) for key in items[0]}


def segments_of(batch: dict[str, torch.Tensor]) -> list[tuple[int, int, int]]:
    """(row, start, stop) of every segment, in stream order."""
    out = []
    for row, ids in enumerate(batch["segment_ids"].tolist()):
        for number in sorted(set(ids) - {0}):
            where = [i for i, value in enumerate(ids) if value == number]
            assert where == list(range(where[0], where[-1] + 1))  # one contiguous run
            out.append((row, where[0], where[-1] + 1))
    return out


def build(pos: str) -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig(vocab_size=30, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64,
                                         max_seq_len=64, qkv_bias=True, bias=True, init_std=0.2, pos=pos,
                                         causal=True)).eval()


def entries(records: list[list[int]] = RECORDS) -> list[list[int]]:
    """Each record as the stream holds it under document masking: `<eos> record <eos>` (no second `<eos>`)."""
    return [[EOS, *record] + ([] if record[-1:] == [EOS] else [EOS]) for record in records]


def test_each_record_is_eos_record_eos_and_each_piece_of_it_in_a_block_one_segment():
    batch = blocks()
    assert set(batch) == {"input_ids", "segment_ids", "labels"}  # segment ids replace the padding mask
    real = batch["segment_ids"] != 0
    stream = [token for entry in entries() for token in entry]
    assert batch["input_ids"][real].tolist() == stream
    assert torch.equal(batch["labels"][real], batch["input_ids"][real])
    assert (batch["labels"][~real] == IGNORE_INDEX).all() and (batch["input_ids"][~real] == PAD).all()
    assert real[:-1].all()  # only the last block is padded
    # Segments: the stream's positions grouped by (block, record), so a record cut by a boundary goes on as a
    # new segment at the start of the next block.
    record_of = [number for number, entry in enumerate(entries()) for _ in entry]
    expected, cut = [], 0
    for position, number in enumerate(record_of):
        row, column = divmod(position, BLOCK)
        if column == 0 or number != record_of[position - 1]:
            expected.append((row, column, column))
            cut += column == 0 and position > 0 and number == record_of[position - 1]
        expected[-1] = (row, expected[-1][1], column + 1)
    assert segments_of(batch) == expected
    assert cut >= 2  # records cut by block boundaries are among them


def test_without_packing_the_blocks_are_unchanged():
    plain = PackedBlockDataset(make_shard(RECORDS), BLOCK, separator_id=EOS, pad_id=PAD)
    assert set(plain[0]) == {"input_ids", "attention_mask", "labels"}
    stream = [token for record in RECORDS for token in record + ([] if record[-1:] == [EOS] else [EOS])]
    assert plain.stream_length == len(stream)
    real = torch.cat([plain[i]["input_ids"][plain[i]["attention_mask"] == 1] for i in range(len(plain))])
    assert real.tolist() == stream


@pytest.mark.parametrize("pos", ["rope", "alibi", "learned", "sinusoidal"])
def test_each_segment_of_a_block_gives_the_logits_and_loss_it_gives_alone(pos):
    model = build(pos)
    batch = blocks()
    with torch.no_grad():
        packed = model(batch["input_ids"], segment_ids=batch["segment_ids"]).logits
        for row, start, stop in segments_of(batch):
            alone = batch["input_ids"][row:row + 1, start:stop]
            torch.testing.assert_close(packed[row, start:stop], model(alone).logits[0], rtol=TOLERANCE, atol=TOLERANCE)
        # A whole record's loss is that of `<eos> record <eos>` run alone: the first token and the end are predicted.
        record = RECORDS[1]
        row, start, stop = segments_of(batch)[1]
        sequence = torch.tensor([[EOS, *record, EOS]])
        assert batch["input_ids"][row, start:stop].tolist() == sequence[0].tolist()
        alone = model(sequence, labels=sequence)
        assert int(alone.scored) == len(record) + 1
        one = {key: value[row:row + 1].clone() for key, value in batch.items()}
        one["labels"][0, :start] = one["labels"][0, stop:] = IGNORE_INDEX
        packed_record = model(one["input_ids"], labels=one["labels"], segment_ids=one["segment_ids"])
        assert int(packed_record.scored) == len(record) + 1
        torch.testing.assert_close(packed_record.loss, alone.loss, rtol=TOLERANCE, atol=TOLERANCE)


@pytest.mark.parametrize("pos", ["rope", "alibi", "learned"])
@pytest.mark.parametrize("fused", [False, True])
def test_a_batch_of_blocks_has_the_loss_of_its_segments_padded(pos, fused):
    model = build(pos)
    batch = blocks()
    spans = segments_of(batch)
    width = max(stop - start for _, start, stop in spans)
    padded = torch.full((len(spans), width), PAD)
    mask = torch.zeros_like(padded)
    for number, (row, start, stop) in enumerate(spans):
        padded[number, :stop - start] = batch["input_ids"][row, start:stop]
        mask[number, :stop - start] = 1
    padded_labels = padded.masked_fill(mask == 0, IGNORE_INDEX)
    with torch.no_grad():
        packed = language_model_loss(model, batch["input_ids"], batch["labels"], fused=fused,
                                     segment_ids=batch["segment_ids"])
        reference = language_model_loss(model, padded, padded_labels, mask, fused=fused)
        # The token-weighted mean of the segments' own losses, each run alone.
        alone = [model(padded[i:i + 1, :int(mask[i].sum())], labels=padded[i:i + 1, :int(mask[i].sum())])
                 for i in range(len(spans))]
    weighted = sum(out.loss * out.scored for out in alone) / sum(out.scored for out in alone)
    assert int(packed.scored) == int(reference.scored) == sum(int(out.scored) for out in alone)
    torch.testing.assert_close(packed.loss, reference.loss, rtol=TOLERANCE, atol=TOLERANCE)
    torch.testing.assert_close(packed.loss, weighted, rtol=TOLERANCE, atol=TOLERANCE)
