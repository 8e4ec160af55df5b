"""AdamW parameter groups and the warmup + cosine learning-rate schedule.

Weight decay applies to matrices only: norm gains, biases and embeddings are left undecayed
(GPT-2/nanoGPT practice; decaying embeddings shrinks rare tokens' vectors towards zero, and
decaying gains and biases fights the normalisation). A tied LM head is the embedding matrix,
so it is undecayed too; each parameter is placed once even when shared.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from biotf.training.config import OptimConfig


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW groups: decayed (weight matrices) and undecayed (norms, biases, embeddings)."""
    embedding_ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay, no_decay, seen = [], [], set()
    for parameter in model.parameters():
        if not parameter.requires_grad or id(parameter) in seen:
            continue
        seen.add(id(parameter))
        # ndim < 2: biases and norm gains; embeddings are matrices but must not decay either.
        undecayed = parameter.ndim < 2 or id(parameter) in embedding_ids
        (no_decay if undecayed else decay).append(parameter)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class WarmupCosine:
    """Learning-rate multiplier: linear warmup from 1/warmup to 1, then cosine decay to `min_ratio`.

    A small class rather than a closure so that LambdaLR can save its state in checkpoints
    (it stores the `__dict__` of callable objects) and `torch.load(weights_only=True)` reads it back.
    """

    def __init__(self, warmup_steps: int, total_steps: int, min_ratio: float):
        self.warmup_steps, self.total_steps, self.min_ratio = warmup_steps, total_steps, min_ratio

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        span = max(1, self.total_steps - self.warmup_steps)
        progress = min(1.0, (step - self.warmup_steps) / span)
        return self.min_ratio + (1.0 - self.min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_optimizer(model: nn.Module, optim: OptimConfig, total_steps: int
                    ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over `parameter_groups` plus its per-step schedule."""
    optimizer = torch.optim.AdamW(parameter_groups(model, optim.weight_decay), lr=optim.lr,
                                  betas=tuple(optim.betas), eps=optim.eps)
    schedule = WarmupCosine(optim.warmup_steps, total_steps, optim.min_lr_ratio)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
