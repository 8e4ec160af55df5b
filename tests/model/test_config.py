"""TransformerConfig: plain values, validated at construction with messages naming field and allowed values."""

from __future__ import annotations

import dataclasses
import json

import pytest

from biotf.errors import ConfigError
from biotf.model import TransformerConfig


def test_defaults_are_plain_values_and_round_trip_through_json():
    config = TransformerConfig()
    values = dataclasses.asdict(config)
    assert json.loads(json.dumps(values)) == values
    assert TransformerConfig.from_dict(values) == config
    assert config.n_kv_heads == config.n_heads  # None means multi-head attention


@pytest.mark.parametrize("changes, field, allowed", [
    (dict(d_model=100, n_heads=8), "d_model", "multiple of n_heads=8"),
    (dict(n_heads=8, n_kv_heads=3), "n_kv_heads", "divisor of n_heads=8"),
    (dict(d_model=36, n_heads=4, pos="rope"), "pos", "learned | sinusoidal | alibi | t5 | none"),
    (dict(pos="learned", max_seq_len=None), "max_seq_len", "integer >= 1"),
    (dict(pos="absolute"), "pos", "learned | sinusoidal | rope | alibi | t5 | none"),
    (dict(norm="batchnorm"), "norm", "layernorm | rmsnorm"),
    (dict(norm_position="sandwich"), "norm_position", "pre | post"),
    (dict(mlp="mish"), "mlp", "gelu | gelu_tanh | relu | swiglu | geglu | geglu_tanh | reglu"),
    (dict(n_layers=0), "n_layers", "integer >= 1"),
    (dict(vocab_size=10.5), "vocab_size", "integer >= 1"),
    (dict(dropout=1.5), "dropout", "0 <= dropout < 1"),
    (dict(causal="yes"), "causal", "true | false"),
    (dict(norm_eps=0), "norm_eps", "> 0"),
    (dict(causal=False, token_dropout=True), "mask_token_id", "an id in 0..31"),
    (dict(causal=False, token_dropout=True, mask_token_id=32), "mask_token_id", "an id in 0..31"),
    (dict(causal=True, token_dropout=True, mask_token_id=3), "token_dropout", "false"),
    (dict(lm_head_bias=1), "lm_head_bias", "true | false"),
    (dict(type_vocab_size=-1), "type_vocab_size", "integer >= 0"),
    (dict(pos="rope", position_offset=2), "position_offset", "0"),
    (dict(lm_head_activation="swish"), "lm_head_activation", "gelu | gelu_tanh | relu"),
    (dict(sliding_window=0), "sliding_window", "integer >= 1, or null"),
    (dict(causal=False, sliding_window=8), "sliding_window", "null"),
    # Sizes no machine can allocate: torch overflowed describing the matrix, even on the meta device (#39).
    (dict(d_model=10**9, n_heads=1), "d_model", "its matrix would hold 3e+18 numbers, more than any machine can"),
    (dict(vocab_size=2**50), "vocab_size", "more than any machine can allocate"),
    (dict(d_ff=2**50), "d_ff", "more than any machine can allocate"),
    (dict(rope_theta=float("inf")), "rope_theta", "a finite number"),
    (dict(norm_eps=float("nan")), "norm_eps", "a finite number"),
])
def test_invalid_values_name_field_and_allowed_values(changes, field, allowed):
    with pytest.raises(ConfigError) as error:
        TransformerConfig(**changes)
    assert error.value.key == field
    assert field in str(error.value) and allowed in str(error.value)


def test_from_dict_refuses_unknown_keys_and_lists_the_allowed_ones():
    with pytest.raises(ConfigError) as error:
        TransformerConfig.from_dict({"d_model": 64, "hidden_size": 64})
    message = str(error.value)
    assert "hidden_size" in message and "unknown" in message
    for name in TransformerConfig.field_names():
        assert name in message


def test_replace_validates_again():
    config = TransformerConfig(d_model=64, n_heads=4)
    assert config.replace(n_layers=3).n_layers == 3
    with pytest.raises(ConfigError):
        config.replace(n_heads=5)


def test_unknown_preset_lists_presets():
    with pytest.raises(ConfigError, match="qwen2.5-0.5b"):
        TransformerConfig.preset("llama-70b")


def test_an_lm_head_part_without_lm_head_is_refused():
    with pytest.raises(ConfigError, match=r"lm_head_bias=True: it is part of the LM head, and lm_head is false"):
        TransformerConfig(lm_head=False, lm_head_bias=True)
    assert not TransformerConfig(lm_head=False).lm_head


def test_a_registered_scheme_is_allowed_and_checks_its_own_fields(monkeypatch):
    from biotf.model.positions import POSITION_CLASSES, PositionEncoding

    class EvenLayers(PositionEncoding):
        @classmethod
        def check_config(cls, config: TransformerConfig) -> None:
            if config.n_layers % 2:
                raise ConfigError("n_layers", config.n_layers, "an even number")

    monkeypatch.setitem(POSITION_CLASSES, "even_layers", EvenLayers)
    assert TransformerConfig.choices()["pos"][-1] == "even_layers"
    assert TransformerConfig(pos="even_layers", n_layers=2).pos == "even_layers"
    with pytest.raises(ConfigError, match=r"invalid config n_layers=3 \(allowed: an even number\)"):
        TransformerConfig(pos="even_layers", n_layers=3)
