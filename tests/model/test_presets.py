"""Presets: each conf/model/*.yaml is the one source of its preset; sizes match the published models."""

from __future__ import annotations

import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from biotf.errors import ConfigError
from biotf.model import Transformer, TransformerConfig
from biotf.model import config as model_config
from biotf.conventions import CONF_DIR
from biotf.training.train_config import register_configs

NAMES = sorted(path.stem for path in (CONF_DIR / "model").glob("*.yaml"))


def test_the_presets_are_the_shipped_yaml_files():
    assert NAMES == TransformerConfig.preset_names() == ["esm2-8m", "gpt2-small", "protein-small", "qwen2.5-0.5b",
                                                         "tiny", "vaswani"]


@pytest.mark.parametrize("name", NAMES)
def test_every_yaml_spells_every_field_and_builds_the_preset(name):
    values = yaml.safe_load((CONF_DIR / "model" / f"{name}.yaml").read_text())
    assert list(values) == TransformerConfig.field_names()  # every field, in the dataclass's order
    assert TransformerConfig.preset(name) == TransformerConfig.from_dict(values)  # validated at construction
    assert TransformerConfig.preset(name).to_dict() == values  # nothing in the file is a placeholder for a default


@pytest.mark.parametrize("name", NAMES)
def test_hydra_composes_the_preset_preset_reads(name):
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"model={name}"])
    assert TransformerConfig.from_dict(OmegaConf.to_container(cfg.model)) == TransformerConfig.preset(name)


def test_preset_reads_the_file_so_an_edit_is_seen(tmp_path, monkeypatch):
    values = {**TransformerConfig.preset("tiny").to_dict(), "n_layers": 3}
    (tmp_path / "edited.yaml").write_text(yaml.safe_dump(values))
    monkeypatch.setattr(model_config, "PRESET_DIR", tmp_path)
    assert TransformerConfig.preset("edited").n_layers == 3
    with pytest.raises(ConfigError, match=r"invalid config model='tiny': unknown model preset \(allowed: edited\)"):
        TransformerConfig.preset("tiny")


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
