"""The language-model loss of a biotf Transformer on a batch: `language_model_loss`, what training calls, plain
(the model's forward with labels) or fused (the trunk, then the head and its cross-entropy over row chunks).

The cross-entropy itself (`cross_entropy`, `linear_cross_entropy`, the targets and the counts) is
`biotf.model.cross_entropy`, below the model, which uses it; its names stay importable from here.
"""

from __future__ import annotations

import torch

from biotf.conventions import IGNORE_INDEX
from biotf.model.cross_entropy import HeadLoss, check_labels, cross_entropy, linear_cross_entropy, lm_targets
from biotf.model.transformer import Transformer

__all__ = ["IGNORE_INDEX", "HeadLoss", "check_labels", "cross_entropy", "language_model_loss", "linear_cross_entropy",
           "lm_targets"]


def language_model_loss(model: Transformer, input_ids: torch.Tensor, labels: torch.Tensor,
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
