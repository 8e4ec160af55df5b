"""Packed rows' records attended apart (`SegmentBatches`, `Attention._batched`) compute what the block-diagonal mask
computes: outputs of real tokens, the loss and every gradient equal to 1e-5 in float32 (dropout off), for every
position kind, causal or not, GQA, a sliding window; and the rule that picks one path or the other."""

from __future__ import annotations

import itertools

import pytest
import torch

from biotf.model import Transformer, TransformerConfig
from biotf.model.attention_mask import AttentionMask, SegmentBatches
from biotf.model.loss import language_model_loss

TOLERANCE = 1e-5
LENGTH = 24
# Rows of 24 tokens: a whole-row record, records of one length (a bucket without padding), records of nearly one
# length (a padded bucket), short and long records with padding after them, a row of padding alone.
ROWS = [[7, 9, 5], [13, 11], [24], [8, 8, 8], [6, 7, 8], [3], []]
ALWAYS, NEVER = 0, None  # `segment_call_cost`s: records attended apart always (no cost is cheaper) / never


def segments_of(rows: list[list[int]], length: int = LENGTH) -> torch.Tensor:
    segments = torch.zeros(len(rows), length, dtype=torch.long)
    for row, lengths in enumerate(rows):
        start = 0
        for number, size in enumerate(lengths, 1):
            segments[row, start:start + size] = number
            start += size
    return segments


def build(pos: str, causal: bool, n_kv_heads: int, **changes) -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig(vocab_size=30, d_model=32, n_layers=2, n_heads=4, n_kv_heads=n_kv_heads,
                                         d_ff=64, max_seq_len=64, init_std=0.2, pos=pos, causal=causal, **changes))


def run(model: Transformer, call_cost: int | None, ids: torch.Tensor, segments: torch.Tensor):
    """Loss, real tokens' hidden states and gradients of one training forward and backward, and whether the records
    were attended apart."""
    model.segment_call_cost = call_cost
    apart = model.block_inputs(ids, segment_ids=segments).mask
    apart = isinstance(apart, AttentionMask) and apart.segment_batches is not None
    model.zero_grad()
    labels = torch.where(segments != 0, ids, -100)
    out = language_model_loss(model, ids, labels, segment_ids=segments)
    out.loss.backward()
    hidden = model.encode(ids, segment_ids=segments).last_hidden_state[segments != 0]
    return out.loss, hidden, {name: p.grad.clone() for name, p in model.named_parameters()}, apart


CASES = [(pos, causal, n_kv_heads, None) for pos, causal, n_kv_heads in
         itertools.product(["learned", "sinusoidal", "rope", "alibi", "none"], [False, True], [4, 2])]
CASES += [("rope", True, 2, 5), ("alibi", True, 4, 5)]


@pytest.mark.parametrize("pos, causal, n_kv_heads, window", CASES)
def test_records_attended_apart_equal_the_block_diagonal_mask(pos, causal, n_kv_heads, window):
    model = build(pos, causal, n_kv_heads, sliding_window=window).train()
    segments = segments_of(ROWS)
    ids = torch.randint(4, 30, segments.shape, generator=torch.Generator().manual_seed(1))
    loss, hidden, grads, apart = run(model, ALWAYS, ids, segments)
    masked_loss, masked_hidden, masked_grads, masked_apart = run(model, NEVER, ids, segments)
    assert apart and not masked_apart
    torch.testing.assert_close(loss, masked_loss, atol=TOLERANCE, rtol=0)
    torch.testing.assert_close(hidden, masked_hidden, atol=TOLERANCE, rtol=0)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, masked_grads[name], atol=TOLERANCE, rtol=0, msg=lambda m: f"{name}: {m}")


def test_rows_of_one_whole_record_each_are_the_one_bucket_as_they_are():
    model = build("alibi", False, 2).eval()
    segments = segments_of([[LENGTH]] * 3)
    ids = torch.randint(4, 30, segments.shape, generator=torch.Generator().manual_seed(1))
    batches = model.block_inputs(ids, segment_ids=segments).mask.segment_batches
    assert batches.whole and batches.shapes == [(3, LENGTH)]
    torch.testing.assert_close(model(ids, segment_ids=segments).logits, model(ids).logits, atol=TOLERANCE, rtol=0)


def test_one_padded_bucket_as_long_as_the_rows_is_not_taken_for_the_rows_themselves():
    # As many records as rows and one a whole row, all in one bucket (19^2 - 1 is under a call's 32^2 scores); but
    # row 1 holds two records and row 2 none: a gather of as many scores as the mask, so the mask is cheaper.
    assert SegmentBatches.of(mask_of([[20], [19, 1], []], 20), head_dims=128) is None


def mask_of(rows: list[list[int]], length: int) -> AttentionMask:
    segments = segments_of(rows, length)
    positions = torch.zeros_like(segments)
    return AttentionMask(positions, positions, False, 4, key_padding=segments != 0, segments=segments)


def test_records_of_similar_length_share_a_bucket_and_the_rest_open_their_own():
    # 100^2 - 90^2 is under a quarter of 100^2: together; 50 would waste more, and more than a call (2^17 / 128 =
    # 32^2 scores): its own bucket, which 48 joins; 10 would waste more than a quarter and a call: its own.
    batches = SegmentBatches.of(mask_of([[100, 50, 10], [90, 48]], 400), head_dims=128)
    assert batches.shapes == [(2, 100), (2, 50), (1, 10)]
    real = batches.targets[batches.targets < 2 * 400]  # padding slots go to the spare row 2 x 400
    assert len(batches.targets) == 2 * 100 + 2 * 50 + 10
    assert sorted(real.tolist()) == list(range(160)) + list(range(400, 400 + 138))  # each real token once


def test_a_few_short_rows_stay_on_the_mask_and_longer_ones_go_apart():
    # Two rows of eight 8-token records: one bucket of 16 x 8, but the rows' whole attention costs less than the
    # gather's fixed cost. Eight rows of 256 hold 32 records each: one bucket, 1/32 of the rows' scores. Six records
    # of 12-52 tokens in three rows of 64: two buckets (52, 44 | 34, 30, 20, 12) that score 80% of the rows, not enough
    # to pay for two calls and the gather. Long records of many lengths in rows of 512: five buckets, 57% of the scores.
    assert SegmentBatches.of(mask_of([[8] * 8] * 2, 64), head_dims=128) is None
    assert SegmentBatches.of(mask_of([[8] * 32] * 8, 256), head_dims=128).shapes == [(256, 8)]
    assert SegmentBatches.of(mask_of([[30, 34], [20, 44], [12, 52]], 64), head_dims=128) is None
    assert len(SegmentBatches.of(mask_of([[300, 212], [100, 412], [256, 256]], 512), head_dims=128).shapes) == 5
