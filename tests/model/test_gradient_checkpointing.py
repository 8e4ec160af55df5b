"""Gradient checkpointing recomputes each block in backward and gives the gradients of the plain run."""

from __future__ import annotations

import pytest
import torch

from biotf.model import Transformer, TransformerConfig
from biotf.model.block import Block


@pytest.mark.parametrize("causal, dropout", [(True, 0.0), (False, 0.1)])
def test_checkpointed_gradients_equal_the_plain_run(causal, dropout, monkeypatch):
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=40, d_model=32, n_layers=3, n_heads=4, n_kv_heads=2, d_ff=64,
                                          causal=causal, dropout=dropout, init_std=0.1)).train()
    ids = torch.randint(0, 40, (3, 12))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0  # padding: the mask travels through the recomputation too
    calls = []
    forward = Block.forward

    def counted(self, *args, **kwargs):  # counts recomputations too (module hooks do not run for those)
        calls.append(1)
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(Block, "forward", counted)

    def gradients(checkpointed: bool) -> dict[str, torch.Tensor]:
        model.gradient_checkpointing = checkpointed
        model.zero_grad()
        calls.clear()
        torch.manual_seed(1)  # the same dropout masks in both runs (checkpoint restores the RNG to recompute)
        model(ids, attention_mask=mask, labels=ids).loss.backward()
        return {n: p.grad.clone() for n, p in model.named_parameters()}

    plain = gradients(False)
    assert len(calls) == 3
    recomputed = gradients(True)
    assert len(calls) == 6  # each block ran again in backward
    for name, grad in plain.items():
        torch.testing.assert_close(recomputed[name], grad, rtol=0, atol=1e-6, msg=name)
    model.eval()
    calls.clear()
    with torch.no_grad():
        model(ids)
    assert len(calls) == 3  # inference never recomputes
