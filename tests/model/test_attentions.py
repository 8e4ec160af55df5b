"""Attention maps (`output_attentions=True`): what transformers' eager attention returns, padding included, from an
explicit path that runs only when asked and computes what the SDPA path computes."""

from __future__ import annotations

import itertools

import pytest
import torch

from biotf.model import Transformer, TransformerConfig

from test_hf import random_qwen2
from test_hf_esm import batch as esm_batch

transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-5  # max abs difference of float32 attention probabilities


def assert_attentions_match(ours: tuple[torch.Tensor, ...], theirs: tuple[torch.Tensor, ...],
                            mask: torch.Tensor) -> None:
    """Every layer's (B, heads, T, T) probabilities agree at every real query row, over all keys (padded keys
    included: both give them 0); padded query rows are unspecified, in HF as in biotf."""
    assert len(ours) == len(theirs)
    real = mask.bool()
    for mine, reference in zip(ours, theirs):
        assert mine.shape == reference.shape and mine.dtype == torch.float32
        assert (mine - reference).abs().permute(0, 2, 1, 3)[real].max().item() <= TOLERANCE


@pytest.mark.parametrize("position", ["rotary", "absolute"])
def test_esm_attentions_match_hf_eager_with_padding(position, random_esm):
    hf = random_esm(position=position, query_key_std=0.3)
    hf.set_attn_implementation("eager")
    model = Transformer.from_hf(hf)
    ids, mask = esm_batch()
    with torch.no_grad():
        ours = model(ids, attention_mask=mask, output_attentions=True)
        theirs = hf(ids, attention_mask=mask, output_attentions=True)
    assert_attentions_match(ours.attentions, theirs.attentions, mask)
    padded_keys = ours.attentions[-1][2][:, :6, 6:]  # row 2 has 6 real tokens
    assert padded_keys.abs().max().item() == 0.0


@pytest.mark.parametrize("side", ["right", "left"])
def test_qwen2_attentions_match_hf_eager_with_padding(side):
    hf = random_qwen2(tied=False, seed=3)
    hf.set_attn_implementation("eager")
    model = Transformer.from_hf(hf)
    assert model.config.n_kv_heads < model.config.n_heads  # grouped-query heads are expanded as HF's repeat_kv
    generator = torch.Generator().manual_seed(4)
    ids = torch.randint(0, 211, (3, 15), generator=generator)
    mask = torch.ones_like(ids)
    for row, pad in enumerate((0, 4, 9)):
        mask[row, slice(0, pad) if side == "left" else slice(15 - pad, 15)] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        ours = model(ids, attention_mask=mask, output_attentions=True)
        theirs = hf(ids, attention_mask=mask, position_ids=positions, output_attentions=True)
    assert_attentions_match(ours.attentions, theirs.attentions, mask)
    later = torch.ones(15, 15, dtype=torch.bool).triu(1) & mask.bool()[:, None, :, None]  # (B, 1, query, key)
    assert ours.attentions[0].masked_select(later).abs().max().item() == 0.0  # causal: no real query sees a later key


def build(**changes) -> Transformer:
    torch.manual_seed(0)
    values = dict(vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, max_seq_len=64,
                  qkv_bias=True, bias=True, init_std=0.2)
    return Transformer(TransformerConfig(**{**values, **changes})).eval()


@pytest.mark.parametrize("pos, causal, norm_position, padded", list(itertools.product(
    ["learned", "rope", "alibi", "none"], [True, False], ["pre", "post"], [False, True])))
def test_the_attentions_path_computes_what_the_sdpa_path_computes(pos, causal, norm_position, padded):
    model = build(pos=pos, causal=causal, norm_position=norm_position)
    generator = torch.Generator().manual_seed(5)
    ids = torch.randint(0, 50, (3, 11), generator=generator)
    mask = torch.ones_like(ids)
    if padded:
        mask[1, :3] = 0  # left padding
        mask[2, 7:] = 0  # right padding
    with torch.no_grad():
        fast = model(ids, attention_mask=mask, output_hidden_states=True)
        explicit = model(ids, attention_mask=mask, output_hidden_states=True, output_attentions=True)
        streamed = list(model.attention_maps(ids, mask))
    assert fast.attentions is None and len(explicit.attentions) == model.config.n_layers
    for a, b in zip(fast.hidden_states + (fast.logits,), explicit.hidden_states + (explicit.logits,)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)
    for layer, maps in enumerate(explicit.attentions):
        assert torch.isfinite(maps).all()
        torch.testing.assert_close(maps.sum(-1), torch.ones(maps.shape[:-1]), rtol=0, atol=1e-5)
        assert torch.equal(maps, streamed[layer])  # the streamed maps are the same maps


def test_attentions_with_a_kv_cache_cover_past_and_new_keys():
    model = build(pos="rope", causal=True)
    ids = torch.randint(0, 50, (2, 9))
    with torch.no_grad():
        whole = model(ids, output_attentions=True).attentions
        prefix = model(ids[:, :6], use_cache=True)
        step = model(ids[:, 6:], past_key_values=prefix.past_key_values, use_cache=True, output_attentions=True)
    for full, last in zip(whole, step.attentions):
        assert last.shape == (2, 4, 3, 9)
        torch.testing.assert_close(last, full[:, :, 6:], rtol=0, atol=1e-5)
