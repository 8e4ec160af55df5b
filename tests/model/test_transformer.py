"""Transformer forward: outputs, loss conventions, hidden states, errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from biotf.errors import ConfigError, InputError
from biotf.model import Transformer, TransformerConfig
from biotf.model.loss import language_model_loss


def tiny(**changes) -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig.preset("tiny", **changes)).eval()


def test_output_fields_and_shapes():
    model = tiny()
    ids = torch.randint(0, 64, (2, 7))
    out = model(ids, output_hidden_states=True)
    assert out.logits.shape == (2, 7, 64)
    assert out.loss is None and out.past_key_values is None
    assert len(out.hidden_states) == model.config.n_layers + 1
    assert all(h.shape == (2, 7, 32) for h in out.hidden_states)
    assert model(ids).hidden_states is None


def test_last_hidden_state_is_after_the_final_norm_and_feeds_the_head():
    model = tiny(tie_embeddings=False)
    out = model(torch.randint(0, 64, (2, 7)), output_hidden_states=True)
    torch.testing.assert_close(model.lm_head(out.hidden_states[-1]), out.logits)


@pytest.mark.parametrize("causal", [True, False])
def test_encode_is_forward_without_the_head(causal):
    """`encode` (what embedding export calls) returns forward's hidden states exactly, padded batches included,
    and refuses bad input the same way."""
    model = tiny(causal=causal)
    ids = torch.randint(0, 64, (2, 7))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    with torch.no_grad():
        full = model(ids, attention_mask=mask, output_hidden_states=True)
        trunk = model.encode(ids, mask, output_hidden_states=True)
    assert torch.equal(trunk.last_hidden_state, full.hidden_states[-1])
    assert all(torch.equal(a, b) for a, b in zip(trunk.hidden_states, full.hidden_states, strict=True))
    assert model.encode(ids).hidden_states is None and model.encode(ids).past_key_values is None
    with pytest.raises(InputError, match="attention_mask must have shape"):
        model.encode(ids, mask[:, :5])


STEM = dict(causal=False, stem="conv", stem_widths=[32], stem_kernel=3, stem_pool=[2])


@pytest.mark.parametrize("changes, packed", [
    (dict(causal=False), False), (dict(causal=False), True), (dict(causal=False, norm_position="post"), True),
    (dict(causal=True, dropout=0.1), False), (STEM, False)],
    ids=["pre", "pre-packed", "post-packed", "dropout", "stem"])
def test_states_at_are_the_token_states_of_those_positions(changes, packed):
    """`states_at` (scoring's: the last block past its attention on the positions read) gives the token states of
    those positions, padded or packed rows, norms before or after, with a stem (computed whole), dropout (off in
    eval); encode refuses `rows` where its states would not be tokens'."""
    model = tiny(**changes)
    ids = torch.randint(4, 64, (3, 8))
    inputs = {"segment_ids": torch.tensor([[1] * 3 + [2] * 5, [1] * 8, [1] * 4 + [2] * 2 + [0] * 2])} if packed else \
        {"attention_mask": torch.tensor([[1] * 8, [1] * 5 + [0] * 3, [1] * 2 + [0] * 6])}
    rows = torch.tensor([0, 7, 9, 12, 16, 17, 3])
    with torch.inference_mode():
        whole = model.token_states(model.encode(ids, **inputs)).flatten(0, 1)[rows]
        torch.testing.assert_close(model.states_at(ids, rows, **inputs), whole, rtol=1e-5, atol=1e-6)
    if "stem" not in changes:
        with pytest.raises(ValueError, match="not with a stem, hidden states"):
            model.encode(ids, output_hidden_states=True, rows=rows)
        model.gradient_checkpointing = True  # the recomputed last block reads the same rows
        states = model.train().encode(ids, rows=rows, **inputs).last_hidden_state
        assert states.shape == (len(rows), model.config.d_model) and states.requires_grad


def test_causal_loss_is_shifted_next_token_cross_entropy():
    model = tiny()
    ids = torch.randint(0, 64, (2, 7))
    labels = ids.clone()
    labels[0, 3] = -100
    out = model(ids, labels=labels)
    expected = F.cross_entropy(out.logits[:, :-1].reshape(-1, 64), labels[:, 1:].reshape(-1), ignore_index=-100)
    torch.testing.assert_close(out.loss, expected)


def test_masked_lm_loss_scores_each_position_against_its_own_label():
    model = tiny(causal=False)
    ids = torch.randint(0, 64, (2, 7))
    labels = torch.full_like(ids, -100)
    labels[:, 2] = ids[:, 2]
    out = model(ids, labels=labels)
    torch.testing.assert_close(out.loss, F.cross_entropy(out.logits[:, 2], ids[:, 2]))


@pytest.mark.parametrize("causal", [True, False])
def test_counts_follow_the_shift_and_match_argmax_without_logits(causal):
    """`scored` / `correct` (what training logs as accuracy) are those of an argmax over the logits, shifted as the
    loss is; the fused loss training uses gives the same loss, counts and gradients with no logits."""
    model = tiny(causal=causal)
    ids = torch.randint(0, 64, (3, 9))
    labels = ids.clone()
    labels[0, 2:5] = -100
    full = model(ids, labels=labels)
    logits, targets = (full.logits[:, :-1], labels[:, 1:]) if causal else (full.logits, labels)
    has_target = targets != -100
    assert full.scored == has_target.sum()
    assert full.correct == (logits.argmax(-1) == targets)[has_target].sum()
    full.loss.backward()
    plain_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    fused = language_model_loss(model, ids, labels, fused=True)
    fused.loss.backward()
    assert fused.logits is None and fused.scored == full.scored and fused.correct == full.correct
    torch.testing.assert_close(fused.loss, full.loss, rtol=0, atol=1e-6)
    for plain, parameter in zip(plain_grads, model.parameters()):
        torch.testing.assert_close(parameter.grad, plain, rtol=0, atol=1e-6)


def test_loss_without_any_target_is_zero_not_nan():
    model = tiny(causal=False)
    ids = torch.randint(0, 64, (2, 7))
    assert model(ids, labels=torch.full_like(ids, -100)).loss.item() == 0.0


def test_tied_head_shares_the_embedding():
    model = tiny()
    assert model.lm_head is None
    untied = tiny(tie_embeddings=False)
    assert untied.num_parameters() == model.num_parameters() + 64 * 32


def test_bad_inputs_are_refused_with_clear_errors():
    model = tiny()
    with pytest.raises(InputError, match="attention_mask must have shape"):
        model(torch.zeros(2, 5, dtype=torch.long), attention_mask=torch.ones(2, 4))
    with pytest.raises(InputError, match="labels must have the shape"):
        model(torch.zeros(2, 5, dtype=torch.long), labels=torch.zeros(2, 4, dtype=torch.long))
    learned = tiny(pos="learned", max_seq_len=8)
    with pytest.raises(InputError, match="max_seq_len=8"):
        learned(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ConfigError, match="causal"):
        tiny(causal=False)(torch.zeros(1, 3, dtype=torch.long), use_cache=True)


def test_esm_switches_train_and_the_head_bias_is_learned():
    # token dropout, embedding norm, MLM head transform and logit bias: every parameter gets a finite gradient
    # through the fused head + loss, and the fused loss equals cross-entropy over the plain logits.
    model = tiny(causal=False, mlp="gelu", norm="layernorm", bias=True, token_dropout=True, mask_token_id=63,
                 embed_norm=True, lm_head_transform=True, lm_head_bias=True).train()
    ids = torch.randint(0, 63, (3, 9))
    ids[:, 2] = 63
    labels = torch.full_like(ids, -100)
    labels[:, 2] = 5
    out = model(ids, labels=labels)
    out.loss.backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())
    assert model.lm_head_bias.grad.abs().sum() > 0
    plain = model(ids).logits
    torch.testing.assert_close(out.loss, F.cross_entropy(plain.flatten(0, 1), labels.flatten()))
