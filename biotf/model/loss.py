"""The LM head and its cross-entropy in one pass over row chunks (the "chunked cross-entropy" lever).

The plain way, `F.cross_entropy(hidden @ W.T, targets)`, writes and re-reads several (tokens x vocab)
matrices: the logits, their log-softmax (kept for backward), the log-softmax gradient and the NLL
gradient (zero-filled, then scattered). At vocab 8,192 and 2,048 tokens each is 64 MB, and on small CPUs
allocating such fresh blocks (page faults) and sweeping them costs as much as the head's matmuls.

`linear_cross_entropy` instead walks over chunks of rows: for each it computes the logits chunk (written
into the returned logits, or into one reused chunk-sized block when the caller needs no logits), its
softmax and loss, the gradient softmax - one_hot (scaled by 1/number of targets) while the chunk is
still hot, and right away the gradients of the hidden states and of the head's weight from it. Only those
two (tokens x d_model and vocab x d_model) are kept for backward, which just scales them. The value and
gradients equal those of `F.cross_entropy(logits.float(), targets, ignore_index=-100)` (mean over
positions with a target; 0 rather than NaN when there is none).

The returned logits are detached from the graph: differentiate the loss, not the logits (call the
model without labels to get differentiable logits). The counts of scored and correctly predicted rows
come from values the loss computes anyway, so a training step logs its accuracy without logits.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

IGNORE_INDEX = -100
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
        # block would be paged in anew on every step (28 ms of a 700 ms step at 2,048 tokens x 8,192).
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
        # (tokens x vocab) tensor for them on every step (64 MB at 2,048 tokens x vocab 8,192).
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
    """What `linear_cross_entropy` returns. `correct` counts the rows with a target whose target logit is the
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
