"""The convolutional stem (`stem: conv`): bins from bases, padding, the bins' attention mask, the upsampling back to
tokens, gradients, the majority rule of bin labels, and what refuses a stem (config checks, Hugging Face export)."""

from __future__ import annotations

import pytest
import torch

from biotf.checkpoint import save_pretrained
from biotf.api import Model
from biotf.conventions import IGNORE_INDEX
from biotf.errors import ConfigError
from biotf.model import Transformer, TransformerConfig
from biotf.model.loss import language_model_loss
from biotf.model.stem import masked_max_pool
from biotf.tokenizers import build_tokenizer

TOLERANCE = 1e-5  # float32: a padded or packed row against the record alone


def stem_model(seed: int = 0, **changes) -> Transformer:
    torch.manual_seed(seed)
    config = TransformerConfig(**{**dict(vocab_size=12, d_model=16, n_layers=2, n_heads=2, d_ff=32, causal=False,
                                         max_seq_len=64, stem="conv", stem_widths=[8, 12], stem_kernel=5,
                                         stem_pool=[2, 3]), **changes})
    model = Transformer(config).eval()
    with torch.no_grad():  # random norm gains and biases, so that a wrong padding path shows
        for name, parameter in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                parameter.normal_(1.0 if name.endswith("weight") else 0.0, 0.3)
    return model


def test_conv_defaults_and_the_factor():
    config = TransformerConfig(d_model=16, n_heads=2, causal=False, stem="conv")
    assert (config.stem_widths, config.stem_kernel, config.stem_pool, config.stem_factor) == ([16, 16], 15, [2, 2], 4)
    assert TransformerConfig().stem_factor == 1
    assert TransformerConfig.from_dict(config.to_dict()) == config  # filled defaults round-trip


@pytest.mark.parametrize("changes, key, allowed", [
    (dict(stem="pool"), "stem", "none | conv"),
    (dict(stem_pool=[2]), "stem_pool", "null"),
    (dict(stem_kernel=5), "stem_kernel", "null"),
    (dict(stem="conv", stem_pool=[]), "stem_pool", "list of integers >= 1"),
    (dict(stem="conv", stem_pool=[2, 0]), "stem_pool", "list of integers >= 1"),
    (dict(stem="conv", stem_pool=[2, 2], stem_widths=[16]), "stem_widths", "a list of 2 widths"),
    (dict(stem="conv", stem_kernel=4), "stem_kernel", "an odd integer"),
    (dict(stem="conv", causal=True), "stem", "none"),
    (dict(stem="conv", contact_head=True), "contact_head", "false"),
])
def test_bad_stem_settings_name_the_key_and_the_allowed_values(changes, key, allowed):
    with pytest.raises(ConfigError) as error:
        TransformerConfig(**{"d_model": 16, "n_heads": 2, "causal": False, **changes})
    assert error.value.key == key and allowed in str(error.value)


@pytest.mark.parametrize("length", [12, 13, 17, 6, 1])  # a multiple of the factor 6, and not
def test_bins_are_ceil_length_over_factor_and_logits_stay_per_token(length):
    model = stem_model()
    ids = torch.randint(0, 12, (2, length))
    trunk = model.encode(ids, output_hidden_states=True, output_attentions=True)
    bins = -(-length // 6)
    assert trunk.last_hidden_state.shape == (2, bins, 16)
    assert all(h.shape == (2, bins, 16) for h in trunk.hidden_states)
    assert all(a.shape == (2, 2, bins, bins) for a in trunk.attentions)
    assert trunk.per_token().shape == model.token_states(trunk).shape == (2, length, 16)
    out = model(ids, labels=ids)
    assert out.logits.shape == (2, length, 12) and torch.isfinite(out.loss)


def test_each_token_reads_its_bin_and_a_partial_last_bin_holds_the_rest():
    model = stem_model()
    trunk = model.encode(torch.randint(0, 12, (1, 14)))  # bins of 6, 6 and the last 2 tokens
    per_token = trunk.per_token()
    for token in range(14):
        torch.testing.assert_close(per_token[0, token], trunk.last_hidden_state[0, token // 6], rtol=0, atol=0)


def test_masked_max_pool_against_a_hand_computation():
    x = torch.tensor([[[1.0], [-3.0], [-2.0], [-5.0], [4.0]]])
    keep = torch.tensor([[True, True, True, False, False]])
    pooled, bins = masked_max_pool(x, keep, 2)
    assert pooled.flatten().tolist() == [1.0, -2.0, 0.0]  # bin 2 ([-2, pad]): its real base only; bin 3: all pad
    assert bins.tolist() == [[True, True, False]]
    pooled, bins = masked_max_pool(x, None, 2)
    assert pooled.flatten().tolist() == [1.0, -2.0, 4.0] and bins.all()  # unpadded: the last bin holds one base


@pytest.mark.parametrize("pos", ["rope", "alibi", "learned", "sinusoidal"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_on_either_side_changes_nothing_real(pos, side):
    model = stem_model(pos=pos)
    record = torch.randint(0, 12, (1, 13))
    alone = model.encode(record)
    alone_logits = model(record).logits
    pad = 7
    filler = torch.full((1, pad), 11)
    ids = torch.cat([record, filler], 1) if side == "right" else torch.cat([filler, record], 1)
    mask = torch.ones_like(ids)
    if side == "right":
        mask[:, 13:] = 0
    else:
        mask[:, :pad] = 0
    trunk = model.encode(ids, mask)
    real_bins = -(-13 // 6)
    assert trunk.bins.mask.tolist() == [[1] * real_bins + [0] * (-(-20 // 6) - real_bins)]
    # bins are counted from the record's first token whatever the side, so they equal the record alone's
    torch.testing.assert_close(trunk.last_hidden_state[:, :real_bins], alone.last_hidden_state, rtol=0, atol=TOLERANCE)
    logits = model(ids, mask).logits
    real = mask.bool()[0]
    torch.testing.assert_close(logits[:, real], alone_logits, rtol=0, atol=TOLERANCE)
    torch.testing.assert_close(trunk.per_token()[:, real], alone.per_token(), rtol=0, atol=TOLERANCE)


def test_a_pad_bin_gets_no_attention_and_pad_tokens_do_not_matter():
    model = stem_model()
    ids = torch.randint(0, 12, (1, 20))
    mask = torch.ones_like(ids)
    mask[:, 7:] = 0  # bins: [0..5], [6, pads], then two pad bins
    with torch.no_grad():
        trunk = model.encode(ids, mask, output_attentions=True)
    for layer in trunk.attentions:
        assert float(layer[..., :2, 2:].abs().max()) == 0.0  # real bins' queries give pad bins nothing
    other = ids.clone()
    other[:, 7:] = (other[:, 7:] + 5) % 12
    torch.testing.assert_close(model(other, mask).logits[:, :7], model(ids, mask).logits[:, :7], rtol=0, atol=0)


def test_gradients_reach_every_stem_parameter():
    model = stem_model().train()
    ids = torch.randint(0, 12, (2, 17))
    mask = torch.ones_like(ids)
    mask[1, 11:] = 0
    labels = ids.masked_fill(mask == 0, IGNORE_INDEX)
    model(ids, mask, labels=labels).loss.backward()
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None and float(parameter.grad.abs().sum()) > 0, name


def test_the_fused_loss_equals_the_plain_one_with_a_stem():
    model = stem_model()
    ids = torch.randint(0, 12, (2, 17))
    mask = torch.ones_like(ids)
    mask[0, :4] = 0
    labels = torch.where(torch.rand(ids.shape) < 0.3, ids, IGNORE_INDEX).masked_fill(mask == 0, IGNORE_INDEX)
    plain = language_model_loss(model, ids, labels, mask)
    fused = language_model_loss(model, ids, labels, mask, fused=True)
    torch.testing.assert_close(fused.loss, plain.loss, rtol=1e-6, atol=1e-6)
    assert int(fused.scored) == int(plain.scored) == int((labels != IGNORE_INDEX).sum())


def test_bin_labels_by_majority_ties_to_the_smallest_class_and_counts_the_outvoted():
    model = stem_model(stem_pool=[2, 2], stem_widths=[8, 8])  # 4 tokens per bin
    labels = torch.tensor([[2, 2, 1, -100,   1, 0, 0, 1,   -100, -100, -100, -100,   2, -100],
                           [0, 1, 1, 1,   -100, -100, -100, -100,   -100, -100, -100, -100,   -100, -100]])
    mask = torch.ones_like(labels)
    mask[1, 4:] = 0
    mask[1] = mask[1].flip(0)  # the second row is left-padded: its 4 real tokens are its last
    labels[1] = labels[1].flip(0)
    trunk = model.encode(torch.zeros_like(labels), mask)
    bins, outvoted = trunk.bins.bin_labels(labels, 3)
    assert bins.tolist() == [[2, 0, -100, 2], [1, -100, -100, -100]]
    assert int(outvoted) == 1 + 2 + 1  # the 1 of bin 0, the two 1s of bin 1 (a 2-2 tie goes to 0), the 0 of row 2


def test_a_checkpoint_of_a_stem_model_round_trips(tmp_path):
    tokenizer = build_tokenizer({"kind": "dna", "k": 1})
    model = stem_model(vocab_size=tokenizer.vocab_size, pos="learned")
    loaded = Model.load(save_pretrained(model, tokenizer, tmp_path / "stem")).network
    assert loaded.config == model.config and loaded.config.stem == "conv"
    ids = torch.randint(4, tokenizer.vocab_size, (2, 19))
    torch.testing.assert_close(loaded.eval()(ids).logits, model(ids).logits, rtol=0, atol=0)


def test_hugging_face_export_refuses_a_stem_naming_model_stem(tmp_path):
    from biotf.checkpoint import save_hf_pretrained

    model = stem_model()
    with pytest.raises(ConfigError, match=r"invalid config model.stem='conv': no Hugging Face architecture has a "
                                          r"convolutional stem.*\(allowed: none\)"):
        model.to_hf(tmp_path / "hf")
    with pytest.raises(ConfigError, match="model.stem"):
        save_hf_pretrained(model, build_tokenizer({"kind": "dna", "k": 1}), tmp_path / "hf2")
    assert not (tmp_path / "hf").exists() and not (tmp_path / "hf2").exists()


def test_export_model_writes_a_stem_model_and_refuses_hf_in_one_line(tmp_path, capsys):
    from biotf.cli import main

    tokenizer = build_tokenizer({"kind": "dna", "k": 1})
    model = stem_model(vocab_size=tokenizer.vocab_size)
    source = save_pretrained(model, tokenizer, tmp_path / "source")
    assert main(["export-model", str(source), str(tmp_path / "again")]) == 0
    loaded = Model.load(tmp_path / "again").network
    ids = torch.randint(4, tokenizer.vocab_size, (1, 23))
    torch.testing.assert_close(loaded.eval()(ids).logits, model(ids).logits, rtol=0, atol=0)
    capsys.readouterr()
    assert main(["export-model", str(source), str(tmp_path / "hf"), "--hf"]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "invalid config model.stem='conv'" in error and "(allowed: none)" in error
    assert not (tmp_path / "hf").exists()
