"""fair-esm `.pt` checkpoints (what `esm.pretrained` downloads into torch hub's cache) as the ESM family reads them.

Two layouts, as fair-esm's `esm.pretrained.load_model_and_alphabet_core` tells them apart:
- ESM-2 (`{"model": state_dict, "cfg": {"model": <encoder_layers, encoder_embed_dim, encoder_attention_heads,
  token_dropout>}}`): rotary positions, no embedding norm, the final `emb_layer_norm_after`;
- ESM-1b and ESM-1v (`{"model": state_dict, "args": <arch "roberta_large", encoder_layers, encoder_embed_dim,
  encoder_ffn_embed_dim, encoder_attention_heads, max_positions, token_dropout>}`): learned positions numbered
  after the pad id, `emb_layer_norm_before` where the weights hold it, and the `<mask>` row of the token embedding
  zeroed, as fair-esm zeroes it on load.
The tensors are renamed to `transformers`' ESM names (its conversion script's table) and the settings written as the
config.json of an `EsmForMaskedLM`, so the one ESM family builds the model. fair-esm ties the LM head's matrix to
the token embedding and loads `lm_head.weight` last: that tensor is the one its model holds for both.

The contact regression fair-esm publishes apart (`<name>-contact-regression.pt`, which `esm.pretrained` downloads
beside the model) is read from beside the file, as fair-esm's `load_model_and_alphabet_local` reads it, and turns
the contact head on.

The file is read with `torch.load(weights_only=True)`; `args` / `cfg["model"]` are `argparse.Namespace` objects,
allowed as plain data (unpickling one sets attributes, nothing else). Other fair-esm architectures (ESM-1's
`protein_bert_base`, the MSA Transformer, ESM-IF) are refused naming theirs; a tensor outside the table is refused
naming it.
"""

from __future__ import annotations

import argparse
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from biotf.errors import CheckpointError
from biotf.untrusted import check_finite, load_tensors

FAIR_ESM_SUFFIX = ".pt"
REGRESSION_SUFFIX = "-contact-regression.pt"
ALPHABET_SIZE, PAD_ID, MASK_ID = 33, 1, 32  # fair-esm's "ESM-1b" alphabet, ESM-2's too: biotf's protein tokenizer
ESM2_MAX_POSITIONS = 1026  # what transformers' ESM-2 configs say (rotary positions have no table)
LAYER_NORM_EPS = 1e-5  # fair-esm's ESM1bLayerNorm is torch's (or apex's) LayerNorm at its default eps
ESM1B_ARCH = "roberta_large"
# fair-esm's prefixes, removed as `esm.pretrained` removes them.
PREFIXES = re.compile(r"^(encoder\.sentence_encoder\.|encoder\.)")
LAYER_NAMES = {"self_attn.q_proj": "attention.self.query", "self_attn.k_proj": "attention.self.key",
               "self_attn.v_proj": "attention.self.value", "self_attn.out_proj": "attention.output.dense",
               "self_attn_layer_norm": "attention.LayerNorm", "fc1": "intermediate.dense", "fc2": "output.dense",
               "final_layer_norm": "LayerNorm", "self_attn.rot_emb": "attention.self.rotary_embeddings"}
MODEL_NAMES = {"embed_tokens": "esm.embeddings.word_embeddings",
               "embed_positions": "esm.embeddings.position_embeddings",
               "emb_layer_norm_before": "esm.embeddings.layer_norm",
               "emb_layer_norm_after": "esm.encoder.emb_layer_norm_after", "lm_head.dense": "lm_head.dense",
               "lm_head.layer_norm": "lm_head.layer_norm", "lm_head": "lm_head",
               "contact_head.regression": "esm.contact_head.regression"}
NAME = re.compile(r"(?:layers\.(\d+)\.)?(.+)\.(weight|bias|inv_freq)")


def is_fair_esm_file(path: str | Path) -> bool:
    path = Path(path)
    return path.is_file() and path.suffix == FAIR_ESM_SUFFIX


def read_fair_esm(path: str | Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(config.json of the equivalent `EsmForMaskedLM`, its tensors under `transformers`' names) of a fair-esm file."""
    path = Path(path)
    data = load_tensors(path, "fair-esm checkpoint", plain_classes=(argparse.Namespace,), map_location="cpu",
                        mmap=zipfile.is_zipfile(path))
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict) or not ({"args", "cfg"} & set(data)):
        raise CheckpointError(f"{path} is not a fair-esm checkpoint: expected {{'model': state dict, 'args' or "
                              "'cfg': settings}, as esm.pretrained saves them")
    regression = path.with_name(path.stem + REGRESSION_SUFFIX)
    if regression.is_file():
        extra = load_tensors(regression, "fair-esm contact regression", map_location="cpu")
        if not isinstance(extra, dict) or not isinstance(extra.get("model"), dict):
            raise CheckpointError(f"{regression} is not a fair-esm contact regression: expected {{'model': tensors}}")
        data["model"].update(extra["model"])
    state = {PREFIXES.sub("", name): tensor for name, tensor in data["model"].items()}
    for name, tensor in state.items():
        if not isinstance(tensor, torch.Tensor):
            raise CheckpointError(f"{path}: model entry {name} is {type(tensor).__name__}, not a tensor")
    check_finite(state.items(), path)
    if "cfg" in data:
        settings = _fields(path, data["cfg"].get("model") if isinstance(data["cfg"], dict) else None, "cfg['model']")
        config = _esm2_config(path, settings, state)
    else:
        settings = {name.removeprefix("encoder_"): value for name, value in _fields(path, data["args"], "args").items()}
        config = _esm1b_config(path, settings, state)
        state["embed_tokens.weight"][MASK_ID].zero_()  # as fair-esm's loader does (in place: lm_head may share it)
    return config, _hf_names(path, state)


def _fields(path: Path, settings: Any, where: str) -> dict[str, Any]:
    if isinstance(settings, argparse.Namespace):
        return vars(settings)
    if isinstance(settings, dict):
        return settings
    raise CheckpointError(f"{path}: {where} is {type(settings).__name__}, not the settings fair-esm saves")


def _setting(path: Path, settings: Mapping[str, Any], name: str) -> int:
    value = settings.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise CheckpointError(f"{path}: setting {name}={value!r} is not a positive integer")
    return value


def _common(path: Path, state: Mapping[str, torch.Tensor], layers: int, width: int, heads: int,
            token_dropout: Any) -> dict[str, Any]:
    embed = state.get("embed_tokens.weight")
    if embed is None or tuple(embed.shape) != (ALPHABET_SIZE, width):
        shape = None if embed is None else tuple(embed.shape)
        raise CheckpointError(f"{path}: embed_tokens.weight has shape {shape}, fair-esm's alphabet and the settings "
                              f"imply ({ALPHABET_SIZE}, {width})")
    return {"model_type": "esm", "architectures": ["EsmForMaskedLM"], "vocab_size": ALPHABET_SIZE,
            "hidden_size": width, "num_hidden_layers": layers, "num_attention_heads": heads, "hidden_act": "gelu",
            "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "pad_token_id": PAD_ID,
            "mask_token_id": MASK_ID, "layer_norm_eps": LAYER_NORM_EPS, "token_dropout": bool(token_dropout),
            "tie_word_embeddings": True}


def _esm2_config(path: Path, settings: Mapping[str, Any], state: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    width = _setting(path, settings, "encoder_embed_dim")
    config = _common(path, state, _setting(path, settings, "encoder_layers"), width,
                     _setting(path, settings, "encoder_attention_heads"), settings.get("token_dropout", False))
    return {**config, "intermediate_size": 4 * width, "position_embedding_type": "rotary",
            "max_position_embeddings": ESM2_MAX_POSITIONS, "emb_layer_norm_before": False}


def _esm1b_config(path: Path, settings: Mapping[str, Any], state: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    arch = settings.get("arch")
    if arch != ESM1B_ARCH:
        raise CheckpointError(f"{path}: fair-esm architecture {arch!r} is not one biotf reads (ESM-2, and ESM-1b / "
                              f"ESM-1v: {ESM1B_ARCH!r}; ESM-1, the MSA Transformer and ESM-IF are not)")
    config = _common(path, state, _setting(path, settings, "layers"), _setting(path, settings, "embed_dim"),
                     _setting(path, settings, "attention_heads"), settings.get("token_dropout", False))
    positions = state.get("embed_positions.weight")
    if positions is None:
        raise CheckpointError(f"{path}: an ESM-1b checkpoint without embed_positions.weight")
    return {**config, "intermediate_size": _setting(path, settings, "ffn_embed_dim"),
            "position_embedding_type": "absolute", "max_position_embeddings": positions.shape[0],
            "emb_layer_norm_before": "emb_layer_norm_before.weight" in state}


def _hf_names(path: Path, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensors under `transformers`' ESM names; the tied matrix from `lm_head.weight` (see the module docstring)."""
    renamed = {}
    for name, tensor in state.items():
        found = NAME.fullmatch(name)
        layer, module, kind = found.groups() if found else (None, None, None)
        table = MODEL_NAMES if layer is None else LAYER_NAMES
        if module not in table:
            raise CheckpointError(f"{path}: tensor {name} has no counterpart in the ESM models biotf reads "
                                  "(ESM-2, ESM-1b, ESM-1v)")
        prefix = "" if layer is None else f"esm.encoder.layer.{layer}."
        renamed[f"{prefix}{table[module]}.{kind}"] = tensor
    head = renamed.pop("lm_head.weight", None)
    if head is not None:
        renamed["esm.embeddings.word_embeddings.weight"] = head
    return renamed
