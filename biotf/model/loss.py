"""The loss of a language model: the cross-entropy of its head, mean over positions with a target (label -100 marks
none).

Two ways to the same value and gradients:
- `cross_entropy(logits, targets)`: the plain way, on logits the caller already has (`Transformer.forward`
  with labels);
- `linear_cross_entropy(hidden, weight, targets)`: the LM head and its cross-entropy fused, over row chunks.
  The plain way writes and re-reads several (tokens x vocab) blocks (logits, log-softmax kept for backward,
  its gradient); this computes each chunk's logits, softmax, loss and the gradients of the hidden states
  and of the head's weight while the chunk is hot, and keeps only those gradients for backward. Logits
  come back detached (or not at all): differentiate the loss.

`language_model_loss(model, ...)` (what training calls) takes one or the other: the fused head is its explicit
opt-in (`fused`, the training config's `trainer.fused_loss`). The model uses this module (`Transformer.forward` with
labels), so `language_model_loss` takes it as an `nn.Module` rather than importing its module. Each way also counts the scored positions and those whose
target has the largest logit (ties count), so a training step logs accuracy without an argmax pass.
Figures: docs/benchmarks.md.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from biotf.conventions import IGNORE_INDEX
from biotf.errors import InputError

ROWS_PER_CHUNK = 512


def _compute_dtype(tensor: torch.Tensor) -> torch.dtype:
    """The dtype autocast would run the head's matmul in (custom Functions see autocast still enabled)."""
    device = tensor.device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    return tensor.dtype


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, targets: torch.Tensor,
                needs_grad: bool, keep_logits: bool):
        dtype = _compute_dtype(hidden)
        h, w = hidden.to(dtype), weight.to(dtype)
        b = None if bias is None else bias.to(dtype)
        rows, vocab = h.shape[0], w.shape[0]
        # Without kept logits every chunk's are written into one chunk-sized scratch block: a fresh (tokens x vocab)
        # block would be paged in anew on every step.
        logits = h.new_empty(rows, vocab) if keep_logits else None
        scratch = None if keep_logits else h.new_empty(min(rows, ROWS_PER_CHUNK), vocab)
        valid = targets != IGNORE_INDEX
        count = valid.sum()
        denominator = count.clamp(min=1)  # the loss is 0, not NaN, without targets
        safe_targets = targets.clamp(min=0)[:, None]
        loss_dtype = torch.promote_types(dtype, torch.float32)  # float32 at least, float64 stays float64
        grad_hidden = torch.empty_like(h) if needs_grad else None
        grad_weight = torch.zeros_like(w, dtype=loss_dtype) if needs_grad else None
        grad_bias = torch.zeros(vocab, dtype=loss_dtype, device=h.device) if needs_grad and b is not None else None
        total = torch.zeros((), dtype=loss_dtype, device=h.device)
        correct = torch.zeros((), dtype=torch.long, device=h.device)
        for start in range(0, rows, ROWS_PER_CHUNK):
            chunk = slice(start, start + ROWS_PER_CHUNK)
            out = logits[chunk] if keep_logits else scratch[:min(ROWS_PER_CHUNK, rows - start)]
            if b is None:
                torch.mm(h[chunk], w.t(), out=out)
            else:
                torch.addmm(b, h[chunk], w.t(), out=out)
            z = out.to(loss_dtype)
            # logsumexp = max + log(sum exp(z - max)) = max - log(the largest probability), which is 1 / sum:
            # softmax plus two cheap maxima, where log_softmax followed by exp for the gradient sweeps twice.
            best = z.amax(-1)
            probs = torch.softmax(z, -1)
            target_logits = z.gather(1, safe_targets[chunk]).squeeze(1)
            chunk_valid = valid[chunk]
            nll = best - probs.amax(-1).log_() - target_logits
            total += nll.masked_fill_(~chunk_valid, 0.0).sum()
            correct += (chunk_valid & (target_logits == best)).sum()
            if needs_grad:
                grad_logits = probs.scatter_add_(1, safe_targets[chunk], -chunk_valid[:, None].to(probs.dtype))
                grad_logits.mul_((chunk_valid.to(grad_logits.dtype) / denominator)[:, None])
                if grad_bias is not None:
                    grad_bias.add_(grad_logits.sum(0))
                grad_logits = grad_logits.to(dtype)
                torch.mm(grad_logits, w, out=grad_hidden[chunk])
                if dtype == grad_weight.dtype:
                    grad_weight.addmm_(grad_logits.t(), h[chunk])
                else:  # accumulate the weight gradient in float32 across chunks
                    grad_weight.add_(torch.mm(grad_logits.t(), h[chunk]))
        ctx.save_for_backward(grad_hidden, grad_weight, grad_bias)
        ctx.dtypes = (hidden.dtype, weight.dtype, None if bias is None else bias.dtype)
        ctx.mark_non_differentiable(*([logits] if keep_logits else []), count, correct)
        # The logits never get a gradient: without this, autograd would hand backward a zero-filled
        # (tokens x vocab) tensor for them on every step.
        ctx.set_materialize_grads(False)
        return logits, total / denominator, count, correct

    @staticmethod
    def backward(ctx, _grad_logits, grad_loss, _grad_count, _grad_correct):
        if grad_loss is None:  # only possible without materialized grads: nothing flows back
            return None, None, None, None, None, None
        grad_hidden, grad_weight, grad_bias = ctx.saved_tensors
        hidden_dtype, weight_dtype, bias_dtype = ctx.dtypes
        grad_h = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_h = (grad_hidden * grad_loss).to(hidden_dtype)
        if ctx.needs_input_grad[1]:
            grad_w = (grad_weight * grad_loss).to(weight_dtype)
        if ctx.needs_input_grad[2]:
            grad_b = (grad_bias * grad_loss).to(bias_dtype)
        return grad_h, grad_w, grad_b, None, None, None


class HeadLoss(NamedTuple):
    """What the losses here return. `correct` counts the rows with a target whose target logit is the
    row's largest (ties count as correct: the accuracy a training log shows, found without an argmax pass)."""

    logits: torch.Tensor | None
    loss: torch.Tensor
    scored: torch.Tensor
    correct: torch.Tensor


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                         bias: torch.Tensor | None = None, keep_logits: bool = True) -> HeadLoss:
    """logits = hidden @ weight.T [+ bias], their mean cross-entropy over rows whose target is not -100, the
    number of such rows and how many of them the largest logit gets right.

    hidden (N, d), weight (V, d), targets (N,), bias (V,) or None. Logits are returned detached (see the module
    docstring), or not at all without `keep_logits`: a training step needs only the loss and the counts.
    """
    needs_grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad
                                              or (bias is not None and bias.requires_grad))
    return HeadLoss(*_LinearCrossEntropy.apply(hidden, weight, bias, targets, needs_grad, keep_logits))


def lm_targets(labels: torch.Tensor, causal: bool, segment_ids: torch.Tensor | None = None) -> torch.Tensor:
    """The target of each position: labels[t] for a masked LM, labels[t + 1] for a causal one (HF's convention:
    pass labels = input_ids). Shifting the labels rather than the logits (as HF's ForCausalLMLoss) copies no
    (B, T, V) tensor. In packed rows (`segment_ids`) a causal model's last token of a record has no target: the
    next token begins another record, and the record run alone has nothing there either."""
    if not causal:
        return labels
    targets = F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)
    if segment_ids is not None:
        targets[:, :-1].masked_fill_(segment_ids[:, 1:] != segment_ids[:, :-1], IGNORE_INDEX)
    return targets


def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> HeadLoss:
    """Mean cross-entropy (float32 at least) of `logits` (..., V) against `targets` (...), with the counts; the
    logits are returned as given (differentiable)."""
    flat = logits.reshape(-1, logits.shape[-1])
    flat = flat.to(torch.promote_types(flat.dtype, torch.float32))
    targets = targets.reshape(-1)
    valid = targets != IGNORE_INDEX
    scored = valid.sum()
    loss = F.cross_entropy(flat, targets, ignore_index=IGNORE_INDEX, reduction="sum") / scored.clamp(min=1)
    with torch.no_grad():
        target_logits = flat.gather(1, targets.clamp(min=0)[:, None]).squeeze(1)
        correct = (valid & (target_logits == flat.amax(-1))).sum()
    return HeadLoss(logits, loss, scored, correct)


def check_labels(labels: torch.Tensor, shape: torch.Size) -> None:
    if labels.shape != shape:
        raise InputError(f"labels must have the shape of input_ids {tuple(shape)}, got {tuple(labels.shape)}")


def language_model_loss(model: nn.Module, input_ids: torch.Tensor, labels: torch.Tensor,
                        attention_mask: torch.Tensor | None = None, fused: bool = False,
                        segment_ids: torch.Tensor | None = None) -> HeadLoss:
    """The loss of `model` (a biotf Transformer) on a batch, with its counts. Plain: `model(..., labels=labels)`.
    `fused`: the trunk, then `linear_cross_entropy` over the head without logits, the same value and gradients
    with less memory traffic (what training uses). `segment_ids`: packed rows (see `Transformer`)."""
    if not fused:
        out = model(input_ids, attention_mask=attention_mask, labels=labels, segment_ids=segment_ids)
        return HeadLoss(out.logits, out.loss, out.scored, out.correct)
    check_labels(labels, input_ids.shape)  # before the trunk runs, as forward checks
    hidden = model.head_input(model.token_states(model.encode(input_ids, attention_mask, segment_ids=segment_ids)))
    targets = lm_targets(labels, model.config.causal, segment_ids)
    return linear_cross_entropy(hidden.reshape(-1, hidden.shape[-1]), model.head_weight, targets.reshape(-1),
                                model.lm_head_bias, keep_logits=False)
