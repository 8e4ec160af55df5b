"""Properties every configuration must have: causality, padding invariance, normalisation, GQA semantics."""

from __future__ import annotations

import itertools

import pytest
import torch

from biotf.model import Transformer, TransformerConfig

POSITIONS = ["learned", "sinusoidal", "rope", "alibi", "none"]


def build(**changes) -> Transformer:
    torch.manual_seed(0)
    values = dict(vocab_size=50, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64, max_seq_len=64,
                  qkv_bias=True, bias=True, init_std=0.1)
    return Transformer(TransformerConfig(**{**values, **changes})).eval()


@pytest.mark.parametrize("pos", POSITIONS)
def test_causal_output_at_t_ignores_tokens_after_t(pos):
    model = build(pos=pos, causal=True)
    ids = torch.randint(0, 50, (2, 12))
    changed = ids.clone()
    changed[:, 7:] = torch.randint(0, 50, (2, 5))
    with torch.no_grad():
        a = model(ids, output_hidden_states=True)
        b = model(changed, output_hidden_states=True)
    torch.testing.assert_close(a.logits[:, :7], b.logits[:, :7], rtol=0, atol=1e-6)
    assert not torch.allclose(a.logits[:, 7:], b.logits[:, 7:])
    for x, y in zip(a.hidden_states, b.hidden_states):
        torch.testing.assert_close(x[:, :7], y[:, :7], rtol=0, atol=1e-6)


def test_bidirectional_output_at_t_sees_later_tokens():
    model = build(causal=False)
    ids = torch.randint(0, 50, (1, 12))
    changed = ids.clone()
    changed[:, -1] = (ids[:, -1] + 1) % 50
    with torch.no_grad():
        assert not torch.allclose(model(ids).logits[:, 0], model(changed).logits[:, 0])


@pytest.mark.parametrize("pos, causal", list(itertools.product(POSITIONS, [True, False])))
def test_padding_does_not_change_real_tokens_outputs(pos, causal):
    model = build(pos=pos, causal=causal)
    torch.manual_seed(1)
    real = [torch.randint(1, 50, (n,)) for n in (9, 5, 7)]
    with torch.no_grad():
        alone = [model(seq[None]).logits[0] for seq in real]
        for side in ("left", "right"):
            ids = torch.zeros(3, 12, dtype=torch.long)
            mask = torch.zeros(3, 12, dtype=torch.long)
            for row, seq in enumerate(real):
                span = slice(12 - len(seq), 12) if side == "left" else slice(0, len(seq))
                ids[row, span], mask[row, span] = seq, 1
            out = model(ids, attention_mask=mask, output_hidden_states=True)
            assert torch.isfinite(out.logits).all()
            for row, seq in enumerate(real):
                span = slice(12 - len(seq), 12) if side == "left" else slice(0, len(seq))
                torch.testing.assert_close(out.logits[row, span], alone[row], rtol=0, atol=1e-5)


def test_an_all_padding_row_stays_finite():
    model = build(causal=False)
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1] = 0
    ids = torch.randint(0, 50, (2, 6))
    out = model(ids, attention_mask=mask, labels=torch.where(mask.bool(), ids, -100))
    out.loss.backward()
    assert torch.isfinite(out.logits).all()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_post_ln_block_outputs_are_normalized_per_position(norm):
    model = build(norm=norm, norm_position="post", n_layers=3)
    with torch.no_grad():
        hidden = model(torch.randint(0, 50, (2, 9)), output_hidden_states=True).hidden_states
    assert model.final_norm is None  # Post-LN has no final norm
    for h in hidden[1:]:  # every block's output (gains 1, biases 0 at initialisation)
        if norm == "layernorm":
            torch.testing.assert_close(h.mean(-1), torch.zeros(h.shape[:-1]), rtol=0, atol=1e-5)
            torch.testing.assert_close(h.var(-1, unbiased=False), torch.ones(h.shape[:-1]), rtol=0, atol=1e-3)
        else:
            torch.testing.assert_close(h.pow(2).mean(-1), torch.ones(h.shape[:-1]), rtol=0, atol=1e-3)


def test_pre_ln_stream_is_not_normalized_but_the_final_state_is():
    model = build(norm="layernorm", norm_position="pre")
    with torch.no_grad():
        hidden = model(torch.randint(0, 50, (2, 9)), output_hidden_states=True).hidden_states
    assert hidden[1].var(-1, unbiased=False).sub(1).abs().max() > 0.05
    torch.testing.assert_close(hidden[-1].var(-1, unbiased=False), torch.ones(2, 9), rtol=0, atol=1e-3)


@pytest.mark.parametrize("n_kv_heads", [1, 2])
def test_grouped_query_attention_equals_multi_head_with_repeated_kv_heads(n_kv_heads):
    gqa = build(n_kv_heads=n_kv_heads)
    mha = build(n_kv_heads=4)
    state = gqa.state_dict()
    head = 8  # head size
    for i in range(2):
        for part in ("weight", "bias"):
            qkv = state[f"blocks.{i}.attn.qkv.{part}"]
            q, k, v = qkv.split((4 * head, n_kv_heads * head, n_kv_heads * head))
            group = 4 // n_kv_heads  # query heads per kv head: kv head j serves query heads j*group ... (j+1)*group-1
            expand = lambda t: t.unflatten(0, (n_kv_heads, head)).repeat_interleave(group, 0).flatten(0, 1)  # noqa: E731
            state[f"blocks.{i}.attn.qkv.{part}"] = torch.cat([q, expand(k), expand(v)])
    mha.load_state_dict(state)
    ids = torch.randint(0, 50, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(gqa(ids).logits, mha(ids).logits, rtol=0, atol=1e-5)


def test_dropout_is_active_in_training_only():
    model = build(dropout=0.3)
    ids = torch.randint(0, 50, (2, 9))
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, model(ids).logits)
        model.train()
        assert not torch.allclose(model(ids).logits, model(ids).logits)


def test_scaled_embeddings_multiply_by_sqrt_d_model():
    model = build(scale_embeddings=True, pos="none")
    ids = torch.randint(0, 50, (1, 4))
    embedded = model(ids, output_hidden_states=True).hidden_states[0]
    torch.testing.assert_close(embedded, model.embed(ids) * 32 ** 0.5)


@pytest.mark.parametrize("pos", POSITIONS)
def test_every_scheme_trains_under_bf16_autocast_and_in_bf16_weights(pos):
    ids = torch.randint(0, 50, (2, 9))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    model = build(pos=pos).train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(ids, attention_mask=mask, labels=ids)
    out.loss.backward()
    assert out.logits.dtype == torch.bfloat16 and torch.isfinite(out.loss)
    assert all(p.grad.dtype == torch.float32 for p in model.parameters())
    model = build(pos=pos).to(torch.bfloat16)
    out = model(ids, attention_mask=mask, labels=ids)
    out.loss.backward()
    assert out.logits.dtype == torch.bfloat16 and torch.isfinite(out.loss)
