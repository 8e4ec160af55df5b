"""Attention in chunks of queries (`AttentionMask`, `Attention._chunked`) computes what attention with the whole mask
computes: outputs and gradients equal to 1e-5 in float32. A tiny `attention_element_budget` forces chunks of a few
rows, uneven at the end."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from biotf.model import Transformer, TransformerConfig
from biotf.model.attention import Attention
from biotf.model.attention_mask import AttentionMask
from biotf.model.positions import AlibiPositions

TOLERANCE = 1e-5
WHOLE = Transformer.attention_element_budget
BATCH, LENGTH, HEADS = 3, 37, 4
# Three query rows per chunk (37 rows: twelve chunks of 3 and one of 1), under the 37 x 37 elements of the smallest
# mask whose rows differ (causal with a window, no padding).
CHUNKED = BATCH * HEADS * LENGTH * 3


def build(**changes) -> Transformer:
    torch.manual_seed(0)
    values = dict(vocab_size=30, d_model=32, n_layers=2, n_heads=HEADS, n_kv_heads=2, d_ff=64, max_seq_len=64,
                  qkv_bias=True, bias=True, init_std=0.2)
    return Transformer(TransformerConfig(**{**values, **changes}))


def padding(side: str) -> torch.Tensor | None:
    """(BATCH, LENGTH) masks: row 0 left-padded, row 1 right-padded, as `side` asks; row 2 unpadded."""
    if side == "none":
        return None
    mask = torch.ones(BATCH, LENGTH, dtype=torch.long)
    if side in ("left", "both"):
        mask[0, :5] = 0
    if side in ("right", "both"):
        mask[1, -6:] = 0
    return mask


def run(model: Transformer, ids: torch.Tensor, mask: torch.Tensor | None, budget: int):
    """Logits, loss and parameter gradients of one training step (labels: real tokens only) under `budget`."""
    model.attention_element_budget = budget
    model.zero_grad()
    labels = ids if mask is None else torch.where(mask.bool(), ids, -100)
    out = model(ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    return out.logits.detach(), out.loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters()}


CASES = [(pos, causal, side, window) for pos, causal, side, window in itertools.product(
    ["alibi", "rope", "learned"], [True, False], ["none", "left", "right", "both"], [None, 6]) if causal or not window]


@pytest.mark.parametrize("pos, causal, side, window", CASES)
def test_chunked_attention_equals_whole_attention_in_outputs_and_gradients(pos, causal, side, window):
    model = build(pos=pos, causal=causal, sliding_window=window).train()
    ids = torch.randint(0, 30, (BATCH, LENGTH), generator=torch.Generator().manual_seed(1))
    mask = padding(side)
    model.attention_element_budget = CHUNKED
    inputs = model.block_inputs(ids, mask)
    if pos == "alibi" or (causal and (mask is not None or window)):  # rows differ: described and run in chunks
        assert isinstance(inputs.mask, AttentionMask) and inputs.mask.chunk_rows == 3
    elif causal:  # SDPA applies causality itself, and builds no mask
        assert inputs.mask is None and inputs.is_causal
    else:  # the same row for every query (padding alone, or nothing): one broadcast row, linear already
        assert inputs.mask is None or inputs.mask.shape == (BATCH, 1, 1, LENGTH)
    logits, loss, gradients = run(model, ids, mask, WHOLE)
    chunked_logits, chunked_loss, chunked_gradients = run(model, ids, mask, CHUNKED)
    real = torch.ones(BATCH, LENGTH, dtype=torch.bool) if mask is None else mask.bool()
    torch.testing.assert_close(chunked_logits[real], logits[real], rtol=0, atol=TOLERANCE)
    torch.testing.assert_close(chunked_loss, loss, rtol=0, atol=TOLERANCE)
    for name, gradient in gradients.items():
        torch.testing.assert_close(chunked_gradients[name], gradient, rtol=0, atol=TOLERANCE, msg=name)


def test_chunks_inside_gradient_checkpointed_blocks_give_the_same_gradients():
    """`trainer.gradient_checkpointing` (each block recomputed in backward) around chunks (each recomputed again)."""
    model = build(pos="alibi", causal=True, sliding_window=6).train()
    ids = torch.randint(0, 30, (BATCH, LENGTH), generator=torch.Generator().manual_seed(4))
    mask = padding("both")
    logits, loss, gradients = run(model, ids, mask, WHOLE)
    model.gradient_checkpointing = True
    chunked_logits, chunked_loss, chunked_gradients = run(model, ids, mask, CHUNKED)
    torch.testing.assert_close(chunked_logits[mask.bool()], logits[mask.bool()], rtol=0, atol=TOLERANCE)
    torch.testing.assert_close(chunked_loss, loss, rtol=0, atol=TOLERANCE)
    for name, gradient in gradients.items():
        torch.testing.assert_close(chunked_gradients[name], gradient, rtol=0, atol=TOLERANCE, msg=name)


@pytest.mark.parametrize("pos, causal, side", [("rope", False, "both"), ("learned", False, "left"),
                                               ("alibi", True, "both"), ("rope", True, "right")])
def test_one_attention_layer_in_chunks_equals_the_whole_mask(pos, causal, side):
    """The layer alone, given the description of any mask (also the broadcast padding row the transformer builds
    whole), with GQA and an uneven last chunk: outputs and the gradients of its input and weights."""
    model = build(pos=pos, causal=causal)
    attention: Attention = model.blocks[0].attn
    mask = padding(side)
    ids = torch.randint(0, 30, (BATCH, LENGTH), generator=torch.Generator().manual_seed(2))
    keys, queries = model._position_ids(mask, 0, LENGTH, ids.device)
    rotary = model.positions.rotary(queries, offset=0 if mask is None else None)
    description = AttentionMask(queries, keys, causal, HEADS, key_padding=mask.bool(), chunk_rows=5,
                                bias=model.positions.attention_bias if pos == "alibi" else None)
    x = torch.randn(BATCH, LENGTH, 32, generator=torch.Generator().manual_seed(3))
    results = []
    for given in (description.block(), description):
        attention.zero_grad()
        inputs = x.clone().requires_grad_()
        y = attention(inputs, rotary, given, False)
        y[mask.bool()].square().mean().backward()
        results.append((y.detach(), inputs.grad, {n: p.grad.clone() for n, p in attention.named_parameters()}))
    (whole, whole_input, whole_weights), (chunked, chunked_input, chunked_weights) = results
    real = mask.bool()
    torch.testing.assert_close(chunked[real], whole[real], rtol=0, atol=TOLERANCE)
    torch.testing.assert_close(chunked_input, whole_input, rtol=0, atol=TOLERANCE)
    for name, gradient in whole_weights.items():
        torch.testing.assert_close(chunked_weights[name], gradient, rtol=0, atol=TOLERANCE, msg=name)


def test_chunks_cover_only_the_keys_their_rows_can_see():
    """A causal chunk ends at its last row's key, a windowed one starts at its first row's window, and its mask is the
    whole mask's rows and keys; a chunk with a row that sees no key (left padding) spans every key, as the whole
    does."""
    config = TransformerConfig(n_heads=2, d_model=16, pos="alibi", causal=True)
    past, length = 4, 12
    key_padding = torch.ones(2, past + length, dtype=torch.bool)
    key_padding[0, :9] = False  # row 0: its first five queries (keys 4..8) see no real key
    keys = (key_padding.long().cumsum(-1) - 1).clamp(min=0)
    description = AttentionMask(keys[:, past:], keys, True, 2, window=3, key_padding=key_padding,
                                bias=AlibiPositions(config).attention_bias)
    whole = description.block()
    assert whole.shape == (2, 2, length, past + length) and description.elements() == whole.numel()
    assert description.chunk(8, 11)[:2] == (past + 8 - 2, past + 11)  # the window of row 8 to the key of row 10
    assert description.chunk(2, 6)[:2] == (0, past + length)  # rows 2..4 of batch row 0 see no key
    for start, stop in ((0, 3), (2, 6), (6, 10), (8, 11), (11, 12)):
        first, end, block = description.chunk(start, stop)
        assert torch.equal(block, whole[:, :, start:stop, first:end])
        outside = torch.cat((whole[:, :, start:stop, :first], whole[:, :, start:stop, end:]), dim=-1)
        assert (outside == float("-inf")).all()


def test_a_broadcast_row_is_built_whole_however_long():
    """Padding of a bidirectional model without a bias is one row per sequence, (B, 1, 1, K), linear in the length:
    built whole whatever the budget, for SDPA's fused kernels."""
    model = build(pos="rope", causal=False)
    model.attention_element_budget = 1
    mask = padding("both")
    built = model.block_inputs(torch.zeros(BATCH, LENGTH, dtype=torch.long), mask).mask
    assert torch.equal(built, mask.bool()[:, None, None, :])


def test_attention_dropout_runs_in_chunks_when_its_scores_exceed_the_budget():
    """With dropout, PyTorch's CPU SDPA computes every score: above the budget the model runs in chunks even with no
    mask at all, and dropout still acts (training outputs vary, evaluation's do not)."""
    model = build(pos="rope", causal=False, dropout=0.2).train()
    ids = torch.randint(0, 30, (BATCH, LENGTH))
    model.attention_element_budget = CHUNKED
    assert isinstance(model.block_inputs(ids).mask, AttentionMask)
    model.attention_element_budget = BATCH * HEADS * LENGTH * LENGTH
    assert model.block_inputs(ids).mask is None
    model.attention_element_budget = CHUNKED
    out = model(ids, labels=ids)
    out.loss.backward()
    assert torch.isfinite(out.loss) and all(torch.isfinite(p.grad).all() for p in model.parameters())
    assert not torch.allclose(model(ids).logits, model(ids).logits)
    model.eval()
    assert model.block_inputs(ids).mask is None


MEMORY_CHILD = """
import json, sys
import torch
from biotf.model import Transformer, TransformerConfig

torch.set_num_threads(1)

def status(field):
    with open("/proc/self/status") as handle:
        return next(int(line.split()[1]) for line in handle if line.startswith(field + ":"))

peaks = {}
for pos, causal in (("alibi", False), ("rope", True)):
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=8, d_model=32, n_layers=1, n_heads=2, d_ff=64, pos=pos,
                                          causal=causal, max_seq_len=None))
    for length in (256, 1024, 4096):  # 256: warm-up of the chunks (the first checkpoint imports much of torch)
        model.attention_element_budget = 2 ** 10 if length == 256 else 2 ** 20
        ids = torch.randint(0, 8, (1, length))
        mask = torch.ones_like(ids)
        mask[0, :3] = 0
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
        before = status("VmRSS")
        model(ids, attention_mask=mask, labels=ids).loss.backward()
        peaks[f"{pos} {length}"] = status("VmHWM") - before
print(json.dumps(peaks))
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="peak RSS is read from Linux's /proc")
def test_training_memory_grows_linearly_not_quadratically():
    """Peak RSS of a training step (forward + backward, ALiBi bidirectional; RoPE causal with padding) at 1,024 and
    4,096 tokens in a child process: 4x the length costs <= 4.5x the memory (measured: about 1.5x and 1.9x; the whole
    masks cost 16x and 13x: 8 and 128 MiB of ALiBi bias). Shorter inputs are quicker, but their few MiB are noise.
    glibc's mmap threshold is fixed so that freed blocks leave RSS (its default raises the threshold as blocks are
    freed, and RSS then counts memory that is free and reused)."""
    done = subprocess.run([sys.executable, "-c", MEMORY_CHILD], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MALLOC_MMAP_THRESHOLD_": str(128 * 1024), "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    peaks = json.loads(done.stdout.strip().splitlines()[-1])
    for pos in ("alibi", "rope"):
        assert peaks[f"{pos} 4096"] <= 4.5 * peaks[f"{pos} 1024"], peaks


def test_attention_probabilities_are_the_whole_masks_above_the_budget():
    """`output_attentions` materialises the probabilities, so it builds the whole mask from the description."""
    model = build(pos="alibi", causal=True).eval()
    ids = torch.randint(0, 30, (BATCH, LENGTH))
    mask = padding("both")
    with torch.no_grad():
        whole = model(ids, attention_mask=mask, output_attentions=True).attentions
        model.attention_element_budget = CHUNKED
        described = model(ids, attention_mask=mask, output_attentions=True).attentions
    for a, b in zip(whole, described):
        assert torch.equal(a, b)
