"""The fused chunked head + cross-entropy equals the plain computation, in value and in gradient."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from biotf.model import loss as loss_module
from biotf.model.loss import linear_cross_entropy


def reference(hidden, weight, targets, bias=None):
    logits = hidden @ weight.t() if bias is None else hidden @ weight.t() + bias
    return logits, F.cross_entropy(logits.to(torch.promote_types(logits.dtype, torch.float32)), targets,
                                   ignore_index=-100)


@pytest.mark.parametrize("with_bias", [False, True])  # ESM's logit bias (lm_head_bias)
@pytest.mark.parametrize("rows", [1, 7, 130])
def test_value_and_gradients_match_plain_cross_entropy(rows, with_bias, monkeypatch):
    monkeypatch.setattr(loss_module, "ROWS_PER_CHUNK", 16)  # several chunks, a ragged last one
    torch.manual_seed(0)
    hidden = torch.randn(rows, 24, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 24, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(50, dtype=torch.float64, requires_grad=True) if with_bias else None
    targets = torch.randint(0, 50, (rows,))
    targets[::3] = -100
    if rows == 1:
        targets[0] = 4
    parameters = [hidden, weight] + ([bias] if with_bias else [])
    logits, loss, scored, correct = linear_cross_entropy(hidden, weight, targets, bias)
    (2.5 * loss).backward()
    grads = [p.grad.clone() for p in parameters]
    for p in parameters:
        p.grad = None
    ref_logits, ref_loss = reference(hidden, weight, targets, bias)
    (2.5 * ref_loss).backward()
    torch.testing.assert_close(logits, ref_logits.detach())
    torch.testing.assert_close(loss, ref_loss)
    for ours, p in zip(grads, parameters):
        torch.testing.assert_close(ours, p.grad)
    assert not logits.requires_grad
    has_target = targets != -100
    assert scored == has_target.sum()
    assert correct == (ref_logits.argmax(-1) == targets)[has_target].sum()  # random logits: no ties


def test_without_kept_logits_the_loss_gradients_and_counts_are_the_same(monkeypatch):
    monkeypatch.setattr(loss_module, "ROWS_PER_CHUNK", 16)
    torch.manual_seed(1)
    hidden = torch.randn(70, 24, requires_grad=True)
    weight = torch.randn(50, 24, requires_grad=True)
    targets = torch.randint(0, 50, (70,))
    targets[::4] = -100
    results = []
    for keep_logits in (True, False):
        out = linear_cross_entropy(hidden, weight, targets, keep_logits=keep_logits)
        out.loss.backward()
        results.append((out, hidden.grad.clone(), weight.grad.clone()))
        hidden.grad = weight.grad = None
    (kept, *kept_grads), (dropped, *dropped_grads) = results
    assert dropped.logits is None and kept.logits.shape == (70, 50)
    assert torch.equal(kept.loss, dropped.loss) and kept.scored == dropped.scored == 52
    assert kept.correct == dropped.correct
    for a, b in zip(kept_grads, dropped_grads):
        assert torch.equal(a, b)


def test_correct_counts_rows_whose_target_has_the_largest_logit():
    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 2.0, 0.0], [5.0, 1.0, 0.0], [0.0, 0.0, 9.0]])
    targets = torch.tensor([1, 1, 2, -100])  # right; tied for the top (counts); wrong; no target
    out = linear_cross_entropy(logits, torch.eye(3), targets)  # identity head: the logits are the hidden states
    assert out.scored == 3 and out.correct == 2


def test_no_target_gives_zero_loss_and_zero_gradients():
    hidden = torch.randn(5, 8, requires_grad=True)
    weight = torch.randn(11, 8, requires_grad=True)
    out = linear_cross_entropy(hidden, weight, torch.full((5,), -100))
    out.loss.backward()
    assert out.loss.item() == 0.0 and hidden.grad.abs().max() == 0 and weight.grad.abs().max() == 0
    assert out.scored == out.correct == 0


def test_without_grad_only_the_value_is_computed():
    hidden, weight = torch.randn(5, 8, requires_grad=True), torch.randn(11, 8)
    targets = torch.randint(0, 11, (5,))
    with torch.no_grad():
        loss = linear_cross_entropy(hidden, weight, targets).loss
    torch.testing.assert_close(loss, reference(hidden, weight, targets)[1].detach())
    assert not loss.requires_grad


def test_bf16_autocast_runs_the_head_in_bf16_and_returns_float32_gradients():
    torch.manual_seed(0)
    hidden = torch.randn(40, 16, requires_grad=True)
    weight = torch.randn(30, 16, requires_grad=True)
    targets = torch.randint(0, 30, (40,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, loss, _, _ = linear_cross_entropy(hidden, weight, targets)
    loss.backward()
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
    assert hidden.grad.dtype == weight.grad.dtype == torch.float32
    hidden_ref, weight_ref = hidden.detach().clone().requires_grad_(), weight.detach().clone().requires_grad_()
    _, ref_loss = reference(hidden_ref, weight_ref, targets)
    ref_loss.backward()
    assert abs(loss.item() - ref_loss.item()) < 0.05
    torch.testing.assert_close(weight.grad, weight_ref.grad, rtol=0.05, atol=0.01)
