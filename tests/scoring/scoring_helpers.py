"""Helpers of the scoring tests: tiny random models, and direct reference implementations (the plain loops a user
writes, one forward per masked copy or per sequence, batch size 1, nothing shared with biotf.scoring)."""

from __future__ import annotations

import torch

from biotf.model import Transformer, TransformerConfig
from protein_batches import one_mask_per_forward_pll

# Weights large enough that predictions are far from uniform: a near-uniform model would make every score ~0
# and hide an off-by-one position.
SHAPE = dict(d_model=32, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=64, pos="rope", norm="layernorm", mlp="gelu",
             init_std=0.3)


def tiny_model(vocab_size: int, causal: bool, max_seq_len: int = 64, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    config = TransformerConfig(vocab_size=vocab_size, max_seq_len=max_seq_len, causal=causal, **SHAPE)
    return Transformer(config).eval()


def log_probs(model, ids: list[int]) -> torch.Tensor:
    """(length, vocab) float64 log-probabilities of one unpadded sequence."""
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0]
    return torch.log_softmax(logits.double(), dim=-1)


def pseudo_log_likelihood(model, tokenizer, sequence: str) -> float:
    """Mask each content token alone (one forward each; <cls> ... <eos>: content is 1..n) and sum log p(token)."""
    return one_mask_per_forward_pll(model, torch.tensor([tokenizer.encode(sequence)]), tokenizer.mask_id)


def causal_log_likelihood(model, tokenizer, sequence: str) -> float:
    """One forward; logits at t - 1 predict token t, for every content token (after <cls>, before <eos>)."""
    ids = tokenizer.encode(sequence)
    table = log_probs(model, ids)
    return sum(table[t - 1, ids[t]].item() for t in range(1, len(ids) - 1))


def masked_marginal(model, tokenizer, wild_type: str, mutations: list[tuple[str, int, str]]) -> float:
    """ProteinGym's masked marginals (`compute_fitness.py`, `label_row`): each mutated position (0-based residues)
    masked alone in the wild type, log p(alt) - log p(wt) read there, summed; token index = residue + 1 for <cls>."""
    total = 0.0
    for wt, position, alt in mutations:
        ids = tokenizer.encode(wild_type)
        ids[position + 1] = tokenizer.mask_id
        total += _log_ratio(log_probs(model, ids), tokenizer, [(wt, position, alt)])
    return total


def masked_marginal_joint(model, tokenizer, wild_type: str, mutations: list[tuple[str, int, str]]) -> float:
    """Every mutated position masked at once in one copy, then the same sum (read by name by test_scorer's
    parametrized comparison)."""
    ids = tokenizer.encode(wild_type)
    for _, position, _ in mutations:
        ids[position + 1] = tokenizer.mask_id
    return _log_ratio(log_probs(model, ids), tokenizer, mutations)


def wt_marginal(model, tokenizer, wild_type: str, mutations: list[tuple[str, int, str]]) -> float:
    """The same differences read off the unmasked wild type."""
    return _log_ratio(log_probs(model, tokenizer.encode(wild_type)), tokenizer, mutations)


def _log_ratio(table: torch.Tensor, tokenizer, mutations: list[tuple[str, int, str]]) -> float:
    token = lambda residue: tokenizer.encode(residue, False)[0]  # noqa: E731
    return sum(table[p + 1, token(alt)].item() - table[p + 1, token(wt)].item() for wt, p, alt in mutations)
