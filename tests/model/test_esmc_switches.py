"""ESM C's switches as general switches of the one transformer: qk_norm, residual_scale, norm_bias, final_norm_bias
and lm_head_transform_bias work with any architecture they fit (here a Qwen-shaped GQA + RMSNorm model too) and are
refused, naming the key, where they cannot mean anything. Parity with transformers: test_hf_esmc.py."""

from __future__ import annotations

import pytest
import torch

from biotf.errors import ConfigError
from biotf.model import Transformer, TransformerConfig
from biotf.model.block import Block

ENCODER = dict(vocab_size=33, d_model=32, n_layers=2, n_heads=4, d_ff=64, causal=False, norm="layernorm", mlp="swiglu")


@pytest.mark.parametrize("changes, key", [
    (dict(residual_scale=0.0), "residual_scale"), (dict(residual_scale=True), "residual_scale"),
    (dict(residual_scale=float("nan")), "residual_scale"), (dict(qk_norm="yes"), "qk_norm"),
    (dict(norm_bias=1), "norm_bias"), (dict(norm_bias=True, norm="rmsnorm"), "norm_bias"),
    (dict(final_norm_bias=True, norm="rmsnorm"), "final_norm_bias"),
    (dict(final_norm_bias=False, norm_position="post"), "final_norm_bias"),
    (dict(lm_head_transform_bias=True), "lm_head_transform_bias"),
])
def test_bad_values_and_combinations_are_refused_naming_the_key(changes, key):
    with pytest.raises(ConfigError, match=f"model.{key}=|{key}="):
        TransformerConfig(**{**ENCODER, **changes})


def test_bias_switches_decide_which_norms_and_head_layers_have_a_bias():
    config = TransformerConfig(**ENCODER, bias=False, norm_bias=True, final_norm_bias=False, lm_head_transform=True,
                               lm_head_transform_bias=True, embed_norm=True, qk_norm=True)
    names = set(Transformer(config).state_dict())
    assert {"blocks.0.attn_norm.bias", "blocks.1.mlp_norm.bias", "embed_norm.bias", "head_transform.dense.bias",
            "head_transform.norm.bias"} <= names
    assert not names & {"final_norm.bias", "blocks.0.attn.q_norm.bias", "blocks.0.attn.out.bias",
                        "blocks.0.mlp.down.bias"}
    # null follows `bias`, as every config before the switches existed
    plain = set(Transformer(TransformerConfig(**ENCODER, bias=True, lm_head_transform=True)).state_dict())
    assert {"final_norm.bias", "blocks.0.attn_norm.bias", "head_transform.dense.bias",
            "blocks.0.mlp.down.bias"} <= plain


@pytest.mark.parametrize("norm, n_kv_heads", [("layernorm", 4), ("rmsnorm", 2)])
def test_qk_norm_makes_attention_blind_to_the_scale_of_queries_and_keys(norm, n_kv_heads):
    """Normalised over their full width, queries and keys do not change when their projection rows are scaled (but
    for the norm's eps); without qk_norm they do (the test can fail)."""
    outputs = {}
    for qk_norm in (True, False):
        torch.manual_seed(0)
        config = TransformerConfig(**{**ENCODER, "norm": norm}, n_kv_heads=n_kv_heads, qk_norm=qk_norm, init_std=0.3)
        model = Transformer(config).eval()
        ids = torch.randint(4, 29, (2, 9))
        with torch.no_grad():
            before = model(ids).logits
            qk_rows = (config.n_heads + config.n_kv_heads) * config.head_dim
            for block in model.blocks:
                block.attn.qkv.weight[:qk_rows] *= 3.0
            outputs[qk_norm] = (before - model(ids).logits).abs().max().item()
    assert outputs[True] <= 1e-4 and outputs[False] > 1e-2  # up to the norm's eps


def test_residual_scale_multiplies_each_branch_before_the_add():
    torch.manual_seed(0)
    plain_config = TransformerConfig(**ENCODER)
    plain = Block(plain_config).eval()
    scaled = Block(plain_config.replace(residual_scale=0.25)).eval()
    scaled.load_state_dict(plain.state_dict())
    x = torch.randn(2, 5, 32)
    with torch.no_grad():
        torch.testing.assert_close(scaled.attend(x, None, None, False) - x,
                                   0.25 * (plain.attend(x, None, None, False) - x))
        torch.testing.assert_close(scaled.feed_forward(x) - x, 0.25 * (plain.feed_forward(x) - x))


def test_a_model_with_the_switches_trains_and_round_trips_through_biotf_export(tmp_path):
    from biotf.checkpoint import save_pretrained
    from biotf.api import Model
    from biotf.tokenizers import AminoAcidTokenizer

    torch.manual_seed(0)
    config = TransformerConfig(**ENCODER, qk_norm=True, residual_scale=0.5, norm_bias=True, final_norm_bias=False,
                               lm_head_transform=True, lm_head_bias=True, lm_head_transform_bias=True)
    model = Transformer(config)
    ids = torch.randint(4, 29, (4, 12))
    labels = torch.where(torch.rand(ids.shape) < 0.3, ids, -100)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        loss = model(ids, labels=labels).loss
        losses.append(loss.item())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert losses[-1] < losses[0]
    assert model.blocks[0].attn.q_norm.weight.grad is not None
    save_pretrained(model.eval(), AminoAcidTokenizer(), tmp_path / "exported")
    reloaded = Model.load(tmp_path / "exported").network
    assert reloaded.config == config
    with torch.no_grad():
        torch.testing.assert_close(reloaded(ids).logits, model(ids).logits, rtol=0, atol=0)


def test_a_causal_model_with_the_switches_decodes_with_its_cache_as_a_full_forward():
    """OLMo-2-shaped use: qk_norm (RMSNorm, grouped-query) in a decoder; a per-token norm keeps the KV cache exact."""
    torch.manual_seed(0)
    config = TransformerConfig(**{**ENCODER, "causal": True, "norm": "rmsnorm"}, n_kv_heads=2, qk_norm=True,
                               residual_scale=0.7, init_std=0.2)
    model = Transformer(config).eval()
    ids = torch.randint(4, 29, (2, 10))
    with torch.no_grad():
        full = model(ids).logits
        prefix = model(ids[:, :6], use_cache=True)
        cache, steps = prefix.past_key_values, [prefix.logits]
        for t in range(6, 10):
            step = model(ids[:, t:t + 1], past_key_values=cache)
            steps.append(step.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-5)
