"""Every combination of pos x norm x norm_position x mlp x causal builds, trains a few steps, and learns."""

from __future__ import annotations

import itertools

import pytest
import torch

from biotf.model import Transformer, TransformerConfig

COMBINATIONS = list(itertools.product(*TransformerConfig.choices().values(), [True, False]))


@pytest.mark.parametrize("pos, norm, norm_position, mlp, causal", COMBINATIONS,
                         ids=["-".join(map(str, c)) for c in COMBINATIONS])
def test_combination_trains(pos, norm, norm_position, mlp, causal):
    torch.manual_seed(0)
    config = TransformerConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64,
                               max_seq_len=32, pos=pos, norm=norm, norm_position=norm_position, mlp=mlp,
                               causal=causal, dropout=0.0)
    model = Transformer(config)
    ids = torch.randint(0, 40, (4, 16))
    mask = torch.ones_like(ids)
    mask[0, 12:] = 0  # one padded row
    labels = torch.where(mask.bool(), ids, -100)
    if not causal:  # masked LM: predict a fixed subset of positions from a corrupted input
        labels[:, ::2] = -100
        ids = ids.clone()
        ids[:, 1::2] = 0
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        loss = model(ids, attention_mask=mask, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.1, losses
