"""The optimizer (AdamW, or Muon for the blocks' matrices with AdamW for the rest), its parameter groups and
the warmup + cosine learning-rate schedule.

Weight decay applies to matrices only: norm gains, biases and embeddings are left undecayed
(GPT-2/nanoGPT practice; decaying embeddings shrinks rare tokens' vectors towards zero, and
decaying gains and biases fights the normalisation). A tied LM head is the embedding matrix,
so it is undecayed too; each parameter is placed once even when shared.

Muon (`torch.optim.Muon`) orthogonalises the momentum of each 2-D weight inside the transformer blocks (Newton-Schulz
iterations) and scales its update to AdamW's RMS (`adjust_lr_fn="match_rms_adamw"`), so one `optim.lr` and
`optim.weight_decay` serve both; embeddings, heads, norms and biases stay with AdamW, as Muon's authors prescribe.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from biotf.training.train_config import OptimConfig


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


def block_matrices(model: nn.Module) -> set[int]:
    """Ids of the trainable 2-D weights inside `model.blocks` (the attention and MLP projections): what Muon
    orthogonalises."""
    return {id(p) for p in model.blocks.parameters() if p.requires_grad and p.ndim == 2}


class Combined(torch.optim.Optimizer):
    """Several optimizers stepped as one, since Lightning's automatic optimisation drives a single optimizer.

    Its `param_groups` are the members' own group dicts, so the learning-rate schedule and gradient clipping act on
    every member; the state lives in the members and is saved and restored per member.
    """

    def __init__(self, members: list[torch.optim.Optimizer]):
        self.members = members
        super().__init__([group for member in members for group in member.param_groups], {})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for member in self.members:
            member.step()
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        for member in self.members:
            member.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict:
        return {"members": [member.state_dict() for member in self.members]}

    def load_state_dict(self, state_dict: dict) -> None:
        saved = state_dict.get("members")
        if not isinstance(saved, list) or len(saved) != len(self.members):
            raise ValueError("the checkpoint's optimizer state is not this optimizer's (optim.optimizer differs?)")
        for member, state in zip(self.members, saved):
            member.load_state_dict(state)
        # Loading replaces each member's group dicts; the schedule must act on the new ones.
        self.param_groups = [group for member in self.members for group in member.param_groups]


def make_optimizer(groups: list[dict], optim: OptimConfig, transformer: nn.Module) -> torch.optim.Optimizer:
    """`optim.optimizer` over `groups` (parameter_groups' dicts, each may carry its own lr). With muon, the
    `block_matrices` of `transformer` move to Muon groups of the same lr and weight decay; the rest stay with AdamW."""
    adamw = {"lr": optim.lr, "betas": tuple(optim.betas), "eps": optim.eps}
    if optim.optimizer == "adamw":
        return torch.optim.AdamW([g for g in groups if g["params"]], **adamw)
    orthogonalised = block_matrices(transformer)
    muon_groups, adamw_groups = [], []
    for group in groups:
        moved = [p for p in group["params"] if id(p) in orthogonalised]
        kept = [p for p in group["params"] if id(p) not in orthogonalised]
        muon_groups += [dict(group, params=moved)] if moved else []
        adamw_groups += [dict(group, params=kept)] if kept else []
    members = [torch.optim.Muon(muon_groups, lr=optim.lr, adjust_lr_fn="match_rms_adamw")] if muon_groups else []
    members += [torch.optim.AdamW(adamw_groups, **adamw)] if adamw_groups else []
    return Combined(members)


def build_optimizer(model: nn.Module, optim: OptimConfig, total_steps: int, groups: list[dict] | None = None
                    ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """`optim.optimizer` over `groups` (default: the model's `parameter_groups`; fine-tuning passes the head's and
    the trunk's, each at its own lr, with the trunk as `model`) plus its per-step schedule."""
    groups = parameter_groups(model, optim.weight_decay) if groups is None else groups
    optimizer = make_optimizer(groups, optim, model)
    schedule = WarmupCosine(optim.warmup_steps, total_steps, optim.min_lr_ratio)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
