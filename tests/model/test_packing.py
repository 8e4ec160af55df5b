"""Packed rows (`segment_ids`): each record of a row computes what it computes alone, for every position kind,
causal or not, with the whole mask or in chunks; a packed batch's loss and gradients equal the padded batch's
(float32, 1e-5)."""

from __future__ import annotations

import itertools

import pytest
import torch

from biotf.errors import InputError
from biotf.model import Transformer, TransformerConfig
from biotf.model.loss import language_model_loss
from biotf.model.segments import segment_positions

TOLERANCE = 1e-5
MASK_ID = 3
# Two packed rows of 24 tokens: three records and padding, two records without padding.
ROWS = [[7, 9, 5], [13, 11]]
LENGTH = 24


def build(pos: str, causal: bool, **changes) -> Transformer:
    torch.manual_seed(0)
    values = dict(vocab_size=30, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, max_seq_len=64,
                  qkv_bias=True, bias=True, init_std=0.2, pos=pos, causal=causal)
    model = Transformer(TransformerConfig(**{**values, **changes}))
    return model.eval()


def records() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return [torch.randint(4, 30, (n,), generator=generator) for n in itertools.chain(*ROWS)]


def pack(items: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids and segment_ids of ROWS, padded with id 0 (segment 0) to LENGTH."""
    ids = torch.zeros(len(ROWS), LENGTH, dtype=torch.long)
    segments = torch.zeros_like(ids)
    taken = iter(items)
    for row, lengths in enumerate(ROWS):
        start = 0
        for number, length in enumerate(lengths, 1):
            ids[row, start:start + length] = next(taken)
            segments[row, start:start + length] = number
            start += length
    return ids, segments


def spans() -> list[tuple[int, int, int]]:
    """(row, start, stop) of every record, in the order of `records()`."""
    out = []
    for row, lengths in enumerate(ROWS):
        start = 0
        for length in lengths:
            out.append((row, start, start + length))
            start += length
    return out


def pad(items: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The same records one per row, right-padded: the unpacked batch."""
    longest = max(len(item) for item in items)
    ids = torch.zeros(len(items), longest, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, item in enumerate(items):
        ids[row, :len(item)], mask[row, :len(item)] = item, 1
    return ids, mask


CASES = list(itertools.product(["learned", "sinusoidal", "rope", "alibi", "none"], [False, True], [False, True]))


@pytest.mark.parametrize("pos, causal, chunked", CASES)
def test_each_record_of_a_packed_row_equals_the_record_alone(pos, causal, chunked):
    model = build(pos, causal)
    if chunked:  # a budget of a few query rows: the description runs attention in chunks
        model.attention_element_budget = 2 * 4 * LENGTH * 5
    items = records()
    ids, segments = pack(items)
    packed = model(ids, segment_ids=segments, output_hidden_states=True)
    for item, (row, start, stop) in zip(items, spans()):
        alone = model(item[None], output_hidden_states=True)
        torch.testing.assert_close(packed.logits[row, start:stop], alone.logits[0], atol=TOLERANCE, rtol=0)
        for layer, (hidden, reference) in enumerate(zip(packed.hidden_states, alone.hidden_states)):
            torch.testing.assert_close(hidden[row, start:stop], reference[0], atol=TOLERANCE, rtol=0,
                                       msg=lambda m: f"layer {layer}: {m}")


def test_a_sliding_window_applies_within_each_record():
    model = build("rope", True, sliding_window=4)
    items = records()
    ids, segments = pack(items)
    packed = model(ids, segment_ids=segments).logits
    for item, (row, start, stop) in zip(items, spans()):
        torch.testing.assert_close(packed[row, start:stop], model(item[None]).logits[0], atol=TOLERANCE, rtol=0)


def test_esm_token_dropout_counts_each_records_own_mask_ratio():
    model = build("rope", False, token_dropout=True, mask_token_id=MASK_ID)
    items = records()
    for number, item in enumerate(items):  # different mask ratios per record
        item[:number + 1] = MASK_ID
    ids, segments = pack(items)
    packed = model.encode(ids, segment_ids=segments).last_hidden_state
    for item, (row, start, stop) in zip(items, spans()):
        alone = model.encode(item[None]).last_hidden_state[0]
        torch.testing.assert_close(packed[row, start:stop], alone, atol=TOLERANCE, rtol=0)


def labels_for(items: list[torch.Tensor], causal: bool) -> list[torch.Tensor]:
    """Causal: every token; masked: a few positions of each record (the rest -100)."""
    if causal:
        return [item.clone() for item in items]
    generator = torch.Generator().manual_seed(2)
    return [torch.where(torch.rand(len(item), generator=generator) < 0.3, item, -100) for item in items]


@pytest.mark.parametrize("pos, causal, fused", list(itertools.product(["rope", "alibi", "learned"], [False, True],
                                                                        [False, True])))
def test_packed_loss_and_gradients_equal_the_padded_batchs(pos, causal, fused):
    model = build(pos, causal, token_dropout=not causal, mask_token_id=MASK_ID).train()
    items = records()
    targets = labels_for(items, causal)
    padded_ids, mask = pad(items)
    padded_labels = torch.where(mask.bool(), pad(targets)[0], -100)
    for row, target in enumerate(targets):
        padded_labels[row, :len(target)] = target
    packed_ids, segments = pack(items)
    packed_labels = torch.full_like(packed_ids, -100)
    for target, (row, start, stop) in zip(targets, spans()):
        packed_labels[row, start:stop] = target

    def step(**batch):
        model.zero_grad()
        out = language_model_loss(model, fused=fused, **batch)
        out.loss.backward()
        return out, {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    padded, padded_grads = step(input_ids=padded_ids, labels=padded_labels, attention_mask=mask)
    packed, packed_grads = step(input_ids=packed_ids, labels=packed_labels, segment_ids=segments)
    assert int(packed.scored) == int(padded.scored) > 0
    torch.testing.assert_close(packed.loss, padded.loss, atol=TOLERANCE, rtol=0)
    assert packed_grads.keys() == padded_grads.keys()
    for name, grad in packed_grads.items():
        torch.testing.assert_close(grad, padded_grads[name], atol=TOLERANCE, rtol=0, msg=lambda m: f"{name}: {m}")


def test_positions_restart_where_each_run_of_ids_starts():
    segments = torch.tensor([[1, 1, 1, 2, 2, 0, 0], [0, 0, 1, 1, 2, 3, 3]])
    expected = torch.tensor([[0, 1, 2, 0, 1, 0, 1], [0, 1, 0, 1, 0, 0, 1]])
    assert torch.equal(segment_positions(segments), expected)


@pytest.mark.parametrize("segments, message", [
    ([[1, 1, 2, 2, 1, 0]], "separate runs"),
    ([[1, -1, 2, 2, 2, 0]], ">= 0"),
    ([[1.0, 1.0, 2.0, 2.0, 2.0, 0.0]], "integers"),
    ([[1, 1, 2, 2, 2]], "shape"),
])
def test_bad_segment_ids_are_refused_in_one_line(segments, message):
    model = build("rope", False)
    with pytest.raises(InputError, match=message):
        model(torch.ones(1, 6, dtype=torch.long), segment_ids=torch.tensor(segments))


def test_segment_ids_come_without_a_padding_mask_a_cache_or_a_stem():
    model = build("rope", True)
    ids, segments = pack(records())
    with pytest.raises(InputError, match="without attention_mask"):
        model(ids, attention_mask=(segments != 0).long(), segment_ids=segments)
    with pytest.raises(InputError, match="KV cache"):
        model(ids, segment_ids=segments, use_cache=True)
    with pytest.raises(InputError, match="without a stem"):  # a bin would mix the ends of two records
        build("rope", False, stem="conv")(ids, segment_ids=segments)
