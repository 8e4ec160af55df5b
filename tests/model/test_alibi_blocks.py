"""ALiBi attention without its mask (`alibi_blocks.AlibiBlocks`) computes what SDPA computes with the whole ALiBi
mask: outputs and the gradients of queries, keys and values equal to 1e-5 in float32, bidirectional and causal, after
a cache, with an uneven last chunk; a long model's chunked attention takes it, and padding or bf16 keep the masked
chunks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from biotf.model import Transformer, TransformerConfig
from biotf.model import alibi_blocks
from biotf.model.alibi_blocks import AlibiBlocks
from biotf.model.positions import AlibiPositions, alibi_slope_values

TOLERANCE = 1e-5
HEADS, DIM = 4, 16


def whole(q, k, v, causal: bool, scale: float | None) -> torch.Tensor:
    """SDPA with the whole ALiBi mask (the transformer's `AttentionMask.block()` for these positions)."""
    keys, queries = k.shape[2], q.shape[2]
    positions = torch.arange(keys)[None]
    bias = AlibiPositions(TransformerConfig(vocab_size=8, d_model=HEADS * DIM, n_heads=HEADS, pos="alibi"))
    mask = bias.attention_bias(positions[:, keys - queries:], positions, causal)
    if causal:
        index = torch.arange(keys)
        mask = mask.masked_fill(index[None, :] > index[keys - queries:, None], float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


@pytest.mark.parametrize("causal, queries, keys, rows, scale", [
    (False, 101, 101, 16, None),  # bidirectional: blocks before, on and after the rows, last chunk of 5
    (False, 101, 101, 1, None),  # one row per chunk
    (False, 40, 40, 64, 1.0),  # one chunk: the diagonal block alone; unscaled scores
    (True, 101, 101, 16, None),  # causal: no block after the rows
    (True, 30, 75, 8, None),  # causal after a cache of 45 keys
])
def test_blocks_equal_the_whole_alibi_mask_in_outputs_and_gradients(causal, queries, keys, rows, scale):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, HEADS, n, DIM, requires_grad=True) for n in (queries, keys, keys))
    grad = torch.randn(2, HEADS, queries, DIM)
    expected = whole(q, k, v, causal, scale)
    expected_grads = torch.autograd.grad(expected, (q, k, v), grad)
    got = AlibiBlocks.apply(q, k, v, torch.tensor(alibi_slope_values(HEADS)), causal, rows, scale)
    got_grads = torch.autograd.grad(got, (q, k, v), grad)
    torch.testing.assert_close(got, expected, rtol=0, atol=TOLERANCE)
    for name, a, b in zip("qkv", got_grads, expected_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=TOLERANCE, msg=name)


def test_far_positions_keep_float32_precision():
    """4,000 tokens in chunks of 512: the row masks are relative to each chunk, so late rows lose no precision."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, HEADS, 4000, DIM, requires_grad=True) for _ in range(3))
    grad = torch.randn(1, HEADS, 4000, DIM)
    expected = whole(q, k, v, False, None)
    expected_grads = torch.autograd.grad(expected, (q, k, v), grad)
    got = AlibiBlocks.apply(q, k, v, torch.tensor(alibi_slope_values(HEADS)), False, 512, None)
    got_grads = torch.autograd.grad(got, (q, k, v), grad)
    torch.testing.assert_close(got, expected, rtol=0, atol=TOLERANCE)
    for name, a, b in zip("qkv", got_grads, expected_grads):
        torch.testing.assert_close(a, b, rtol=0, atol=TOLERANCE, msg=name)


def counted(monkeypatch) -> list[int]:
    calls: list[int] = []
    apply = AlibiBlocks.apply
    monkeypatch.setattr(AlibiBlocks, "apply", lambda *args: calls.append(1) or apply(*args))
    return calls


@pytest.mark.parametrize("causal", [False, True])
def test_a_long_alibi_model_attends_in_blocks_and_equals_its_whole_mask(monkeypatch, causal):
    """Above the element budget a float32 ALiBi model without padding takes the blocks (GQA: keys and values
    repeated per query head): logits and every parameter gradient equal the whole mask's."""
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=30, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64,
                                          pos="alibi", causal=causal, init_std=0.2))
    ids = torch.randint(0, 30, (2, 45))
    results = []
    for budget in (Transformer.attention_element_budget, 2 * 4 * 45 * 3):
        model.attention_element_budget = budget
        model.zero_grad()
        out = model(ids, labels=ids)
        out.loss.backward()
        results.append((out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    calls = counted(monkeypatch)
    model(ids)
    assert len(calls) == 2  # one per layer
    (logits, grads), (chunked_logits, chunked_grads) = results
    torch.testing.assert_close(chunked_logits, logits, rtol=0, atol=TOLERANCE)
    for name, gradient in grads.items():
        torch.testing.assert_close(chunked_grads[name], gradient, rtol=0, atol=TOLERANCE, msg=name)


def test_padding_and_bf16_keep_the_masked_chunks(monkeypatch):
    """The blocks assume positions that are the key indices, and float32: padding or bf16 run the masked chunks."""
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=30, d_model=32, n_layers=1, n_heads=4, d_ff=64, pos="alibi"))
    model.attention_element_budget = 4 * 40 * 3
    ids = torch.randint(0, 30, (1, 40))
    calls = counted(monkeypatch)
    model(ids, attention_mask=torch.ones(1, 40, dtype=torch.long))
    model.to(torch.bfloat16)(ids)
    assert calls == []


def test_rows_per_block_is_bounded():
    assert alibi_blocks.ROWS ** 2 * HEADS <= Transformer.attention_element_budget


@pytest.mark.parametrize("before", [False, True])
def test_the_denormal_flush_is_restored(before):
    """The blocks flush denormals while they run and leave the caller's setting as it was."""
    torch.set_flush_denormal(before)
    try:
        q = torch.randn(1, HEADS, 20, DIM, requires_grad=True)
        AlibiBlocks.apply(q, q, q, torch.tensor(alibi_slope_values(HEADS)), False, 8, None).sum().backward()
        assert (torch.tensor([1e-39]).mul(1.0).item() == 0.0) is before
    finally:
        torch.set_flush_denormal(False)


def test_alibi_whose_mask_fits_the_budget_runs_in_blocks_above_a_size(monkeypatch):
    """Under the element budget, a float32 ALiBi input with more than `WHOLE_MASK_ELEMENTS` mask elements runs in
    blocks (equal to its whole mask's outputs); under that size, or in bf16 or under bf16 autocast, the mask is built
    whole."""
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=30, d_model=32, n_layers=1, n_heads=4, d_ff=64, pos="alibi",
                                          init_std=0.2))
    ids = torch.randint(0, 30, (1, 40))
    expected = model(ids).logits
    calls = counted(monkeypatch)
    monkeypatch.setattr(alibi_blocks, "WHOLE_MASK_ELEMENTS", 4 * 40 * 40 - 1)
    torch.testing.assert_close(model(ids).logits, expected, rtol=0, atol=TOLERANCE)
    with torch.inference_mode():  # as `biotf embed` runs
        torch.testing.assert_close(model(ids).logits, expected, rtol=0, atol=TOLERANCE)
    assert len(calls) == 2
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(ids)
    monkeypatch.setattr(alibi_blocks, "WHOLE_MASK_ELEMENTS", 4 * 40 * 40)
    model(ids)
    assert len(calls) == 2
