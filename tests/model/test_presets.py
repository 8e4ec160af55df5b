"""Presets: Python values and conf/model/*.yaml agree one to one; sizes match the published models."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from biotf.model import PRESETS, Transformer, TransformerConfig

CONF = Path(__file__).resolve().parents[2] / "conf" / "model"


def test_every_yaml_is_a_preset_and_every_preset_has_a_yaml():
    assert {p.stem for p in CONF.glob("*.yaml")} == set(PRESETS)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_yaml_mirrors_the_python_preset_key_for_key(name):
    values = yaml.safe_load((CONF / f"{name}.yaml").read_text())
    assert list(values) == TransformerConfig.field_names()  # every field, in the dataclass's order
    assert values == PRESETS[name]
    assert all(type(values[k]) is type(PRESETS[name][k]) for k in values)
    assert TransformerConfig.from_dict(values) == TransformerConfig.preset(name)


def test_qwen25_05b_parameter_count_on_meta_device():
    with torch.device("meta"):
        model = Transformer(TransformerConfig.preset("qwen2.5-0.5b"))
    assert model.num_parameters() == 494_032_768
    embedding = model.num_parameters() - model.num_parameters(exclude_embeddings=True)
    assert embedding == 136_134_656
    assert embedding * 2 / 1e6 == pytest.approx(272.3, abs=0.05)  # MB in bf16


def test_esm2_8m_shape_matches_hf_esm():
    # transformers.EsmForMaskedLM at facebook/esm2_t6_8M_UR50D's config has 7,512,474 parameters; of those,
    # biotf's preset lacks only the contact head (6*20 + 1): the MLM head's dense + LayerNorm + decoder bias
    # are the switches lm_head_transform and lm_head_bias.
    with torch.device("meta"):
        model = Transformer(TransformerConfig.preset("esm2-8m"))
    assert model.num_parameters() == 7_512_474 - (6 * 20 + 1)


def test_gpt2_small_parameter_count_matches_hf():
    with torch.device("meta"):
        model = Transformer(TransformerConfig.preset("gpt2-small"))
    assert model.num_parameters() == 124_439_808  # openai-community/gpt2


def test_preset_overrides_replace_vocab_size():
    assert TransformerConfig.preset("protein-small", vocab_size=29).vocab_size == 29


def test_for_tokenizer_takes_its_mask_id_only_where_token_dropout_uses_it():
    esm2 = TransformerConfig.preset("esm2-8m").for_tokenizer(40, mask_id=39)
    assert (esm2.vocab_size, esm2.mask_token_id) == (40, 39)
    small = TransformerConfig.preset("protein-small").for_tokenizer(29, mask_id=28)
    assert (small.vocab_size, small.mask_token_id) == (29, None)
