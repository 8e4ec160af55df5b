"""What biotf knows of one Hugging Face model family (one `model_type`): the architectures it reads, which of them
are causal language models, and the functions that translate its config.json and tensors to biotf's and back; and
the helpers those functions share (refusing a field, looking tensors up, checking that a family holds a config)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, NamedTuple

import torch

from biotf.errors import CheckpointError
from biotf.model.config import TransformerConfig

ConfigReader = Callable[[Mapping[str, Any]], TransformerConfig]

_NULL = type(None)
# The JSON type of every config.json field a family reads, checked for all of them before a family's reader does
# arithmetic on one (`hf_model_config`): `n_embd: "32"` is one line naming the field, not Python's string-formatting
# error. A size or id is an integer, a rate or epsilon a number, a switch true or false; null where a family reads
# the field with a fallback (`hf.get(key) or ...`).
CONFIG_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    **dict.fromkeys(("vocab_size", "n_embd", "n_embed", "n_head", "n_layer", "n_positions", "num_hidden_layers",
                     "num_attention_heads", "intermediate_size", "type_vocab_size"), int),
    **dict.fromkeys(("hidden_size", "n_inner", "num_key_value_heads", "head_dim", "max_position_embeddings",
                     "sliding_window", "pad_token_id", "mask_token_id"), (int, _NULL)),
    **dict.fromkeys(("initializer_range", "rope_theta", "layer_norm_epsilon", "rms_norm_eps", "resid_pdrop",
                     "hidden_dropout", "attention_dropout"), (int, float)),
    **dict.fromkeys(("layer_norm_eps", "hidden_dropout_prob"), (int, float, _NULL)),
    **dict.fromkeys(("tie_word_embeddings", "scale_attn_weights", "scale_attn_by_inverse_layer_idx",
                     "add_cross_attention", "is_decoder", "token_dropout", "mlp_bias", "attention_bias",
                     "use_sliding_window", "emb_layer_norm_before", "apply_residual_connection_post_layernorm"),
                    (bool, _NULL)),
}
TensorMap = Callable[[Mapping[str, torch.Tensor], TransformerConfig], dict[str, torch.Tensor]]


class Family(NamedTuple):
    """One family. `config` refuses (CheckpointError naming the field) what the transformer cannot express;
    `to_biotf` renames and fuses tensors, looking each up once (a lazy mapping then frees sources as it goes).
    `export_config` / `from_biotf` write a biotf model in this family's form (None: biotf does not write it);
    `export_config` refuses a biotf config the family cannot hold, naming the field."""

    model_type: str
    architectures: tuple[str, ...]
    causal: tuple[str, ...]
    config: ConfigReader
    to_biotf: TensorMap
    export_config: Callable[[TransformerConfig], dict[str, Any]] | None = None
    from_biotf: TensorMap | None = None


def refuser(name: str) -> Callable[[str, Any, str], CheckpointError]:
    """`refuse(key, value, reason)`: the error for a config.json field of family `name` biotf cannot express."""

    def refuse(key: str, value: Any, reason: str) -> CheckpointError:
        return CheckpointError(f"{name} config {key}={value!r} is not supported: {reason}")

    return refuse


def first_prefix(weights: Mapping[str, torch.Tensor], prefixes: Sequence[str], anchor: str) -> str | None:
    """The first of `prefixes` under which `weights` holds `anchor`, None if none does."""
    return next((p for p in prefixes if p + anchor in weights), None)


def tensor_reader(weights: Mapping[str, torch.Tensor], name: str, prefixes: tuple[str, ...],
                  anchor: str) -> tuple[Callable[[str], torch.Tensor], str]:
    """(take, prefix): `take(full name)` looks one tensor up (a lazy mapping then frees each source as it goes),
    naming a missing one; `prefix` is the first of `prefixes` under which the checkpoint holds `anchor` (the
    architecture's or a torch.compile'd model's "_orig_mod." before the names)."""
    prefix = first_prefix(weights, prefixes, anchor)
    if prefix is None:
        raise CheckpointError(f"not a {name} checkpoint: no tensor {anchor!r} (under any of the prefixes "
                              f"{', '.join(repr(p) for p in prefixes)})")

    def take(tensor_name: str) -> torch.Tensor:
        if tensor_name not in weights:
            raise CheckpointError(f"{name} checkpoint lacks tensor {tensor_name!r}")
        return weights[tensor_name]

    return take, prefix


def read_architectures(hf: Mapping[str, Any], known: Sequence[str], refuse: Callable[[str, Any, str], Exception],
                       reads: str = "biotf loads") -> set[str]:
    """config.json's `architectures` (absent: the first of `known`, as hub checkpoints without the field are read),
    refused naming the field unless one of them is `known`."""
    architectures = hf.get("architectures") or [known[0]]
    if not set(architectures) & set(known):
        raise refuse("architectures", architectures, f"{reads} {' | '.join(known)}")
    return set(architectures)


def trunk_prefix(weights: Mapping[str, torch.Tensor], name: str, trunk: str, anchor: str) -> str:
    """The prefix before the encoder's names in `weights`: `trunk` (a model with a head: `bert.`, `esmc.`), none (the
    bare encoder), or either after the `_orig_mod.` of a torch.compile'd model; found by where `anchor` is."""
    prefix = first_prefix(weights, (trunk, "", "_orig_mod." + trunk, "_orig_mod."), anchor)
    if prefix is None:
        article = "an" if name[0] in "AEIOU" else "a"
        raise CheckpointError(f"not {article} {name} checkpoint: no {anchor}, with or without {trunk!r}")
    return prefix


def check_holds(config: TransformerConfig, name: str, shape: Mapping[str, tuple[Any, ...]],
                free: Collection[str]) -> None:
    """Refuse (CheckpointError naming the field) a biotf config family `name` cannot hold: each field of `shape` must
    have one of its values, and every field neither in `shape` nor `free` (those the family writes or ignores) its
    TransformerConfig default, the default of every optional feature being "off"."""
    defaults = TransformerConfig.__dataclass_fields__
    for key in TransformerConfig.field_names():
        allowed = shape.get(key, () if key in free else (defaults[key].default,))
        value = getattr(config, key)
        if allowed and value not in allowed:
            needed = " | ".join(repr(v) for v in allowed)
            article = "an" if name[0] in "AEIOU" else "a"
            raise CheckpointError(f"cannot write {article} {name} checkpoint: config {key}={value!r}, {name} needs "
                                  f"{key}={needed}")
