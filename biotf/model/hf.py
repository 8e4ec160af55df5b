"""Hugging Face checkpoints <-> biotf: one explicit weight-mapping function per direction and format.

Supported formats, read from a model object or from a directory of config.json + model.safetensors (or
shards listed in model.safetensors.index.json, or a pytorch_model.bin read with `torch.load(weights_only=True)`,
which unpickles tensors only, never code):
- Qwen2 (`model_type: qwen2`, `Qwen2ForCausalLM`), also written as config.json + model.safetensors;
- ESM (`model_type: esm`, `EsmForMaskedLM`: ESM-2 with rotary positions, ESM-1b with absolute ones; also the encoder
  of `EsmModel`, `EsmForSequenceClassification` and `EsmForTokenClassification`, which have no LM head: the model
  then has `lm_head=False`, and their pooler / classifier weights are not read). The contact-prediction regression
  (`esm.contact_head.regression.*`, or `contact_head.regression.*` without the `esm.` prefix, fair-esm's names) is
  read when the checkpoint has it, and turns `contact_head` on (`biotf.model.contacts`).
Other model types are refused with a `CheckpointError`; a new format adds a `<format>_config` /
`<format>_to_biotf` pair here and an entry in `FAMILIES`.

The name maps live in the code, one per family (`qwen2_to_biotf`, `esm_to_biotf` and their inverses); the
tests compare logits with `transformers` for each.

Rotary inverse frequencies are taken from the checkpoint when it stores them, under any of the names
transformers has written: one shared `...rotary_embeddings.inv_freq` / `model.rotary_emb.inv_freq`, one per layer
(`...layer.{i}...`, which must agree), or the literal `layer.*` form of transformers 5's `save_pretrained`. Official
ESM-2 checkpoints store values rounded to float16 (they were trained in it) and HF computes with those: recomputing
them from rope_theta moves ESM-2 8M's logits by up to 0.1. Without a stored tensor they are computed from rope_theta.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from biotf.errors import CheckpointError
from biotf.model.config import TransformerConfig
from biotf.model.positions import rope_inverse_frequency
from biotf.untrusted import load_tensors, read_json_object

if TYPE_CHECKING:  # the model class is passed in by `Transformer.from_hf`: this module does not import it
    from biotf.model.transformer import Transformer

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
PICKLE_WEIGHTS_FILE = "pytorch_model.bin"
# config.json's fields that choose what is loaded, checked before they are used; the rest are checked as the
# model's config is built from them (`load_hf`).
HF_CONFIG_TYPES = {"model_type": str, "architectures": list}


# --- reading ------------------------------------------------------------------------------------
def read_hf_config(directory: Path) -> dict[str, Any]:
    path = directory / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(f"{directory} is not a Hugging Face model directory: no {CONFIG_FILE}")
    return read_json_object(path, "model config", CheckpointError, types=HF_CONFIG_TYPES)


class SafetensorsWeights(Mapping[str, torch.Tensor]):
    """The tensors of safetensors files, each read (memory-mapped) only when looked up.

    Lazy so that a mapping function which fuses tensors (q/k/v, gate/up) drops each source right after
    use: loading never holds a second full copy of the weights (issue 6: peak RSS <= 1.3x their size).
    A conversion to `dtype` that shrinks a tensor happens here, before fusing; one that grows it is left
    to the loader (`load_hf`), in the same copy as any other conversion it makes.
    """

    def __init__(self, files: Mapping[str, Path], dtype: torch.dtype | None = None):
        self._files, self._dtype = dict(files), dtype

    def stored(self, name: str) -> torch.Tensor:
        """The tensor in the dtype of its file."""
        from safetensors import safe_open

        # A file opened per tensor: a tensor keeps its file's mapping alive, so with one shared handle the pages
        # of every fused (freed) source would stay resident as long as any unfused tensor lives.
        with safe_open(self._files[name], framework="pt") as handle:
            return handle.get_tensor(name)

    def __getitem__(self, name: str) -> torch.Tensor:
        tensor = self.stored(name)
        if self._dtype is None or tensor.element_size() < self._dtype.itemsize:
            return tensor
        return tensor.to(self._dtype)

    def __iter__(self):
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)


def read_weights(directory: Path, dtype: torch.dtype | None = None) -> Mapping[str, torch.Tensor]:
    """All tensors of model.safetensors, or of the shards listed by model.safetensors.index.json (lazily), or
    of pytorch_model.bin (memory-mapped; `weights_only=True` refuses anything but tensors and plain values)."""
    from safetensors import safe_open

    def names(file: Path) -> list[str]:
        with safe_open(file, framework="pt") as handle:
            return list(handle.keys())

    if (directory / WEIGHTS_FILE).is_file():
        return SafetensorsWeights(dict.fromkeys(names(directory / WEIGHTS_FILE), directory / WEIGHTS_FILE), dtype)
    if (directory / INDEX_FILE).is_file():
        index = read_json_object(directory / INDEX_FILE, "weights index", CheckpointError, types={"weight_map": dict})
        if not all(isinstance(shard, str) for shard in index.get("weight_map", {}).values()):
            raise CheckpointError(f"cannot read weights index {directory / INDEX_FILE}: its weight_map must map "
                                  "tensor names to shard file names")
        files: dict[str, Path] = {}
        for shard in sorted(set(index.get("weight_map", {}).values())):
            if not (directory / shard).is_file():
                raise CheckpointError(f"{directory / INDEX_FILE} lists shard {shard}, which is missing")
            files.update(dict.fromkeys(names(directory / shard), directory / shard))
        missing = sorted(set(index.get("weight_map", {})) - set(files))
        if missing:
            raise CheckpointError(f"{directory}: tensors listed in {INDEX_FILE} but absent from the shards: "
                                  f"{missing[:5]}")
        return SafetensorsWeights(files, dtype)
    if (directory / PICKLE_WEIGHTS_FILE).is_file():
        return load_tensors(directory / PICKLE_WEIGHTS_FILE, "weights", map_location="cpu", mmap=True)
    found = sorted(p.name for p in directory.iterdir())
    raise CheckpointError(f"{directory} has no {WEIGHTS_FILE} or {INDEX_FILE}, nor a {PICKLE_WEIGHTS_FILE} "
                          f"(found: {found})")


def _hf_object_config_and_weights(model: Any) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    config = model.config.to_dict()
    config["architectures"] = [type(model).__name__]  # as save_pretrained writes it
    return config, dict(model.state_dict())


def stored_inverse_frequency(weights: Mapping[str, torch.Tensor], pattern: str,
                             config: TransformerConfig) -> dict[str, torch.Tensor]:
    """`{"positions.inverse_frequency": tensor}` when the checkpoint stores rotary inverse frequencies under a name
    matching `pattern` (a regex), else {}. Several copies (one per layer) must be equal; each must have
    head_dim / 2 values."""
    found = [name for name in weights if re.fullmatch(pattern, name)]
    if not found or config.pos != "rope":
        return {}
    # As stored: `SafetensorsWeights` would round them to a smaller loading dtype, and they stay float32.
    stored = weights.stored if isinstance(weights, SafetensorsWeights) else weights.__getitem__
    first = stored(found[0])
    if tuple(first.shape) != (config.head_dim // 2,):
        raise CheckpointError(f"rotary inverse frequencies {found[0]} have shape {tuple(first.shape)}, the config "
                              f"implies ({config.head_dim // 2},)")
    for name in found[1:]:
        if not torch.equal(stored(name).to(first.dtype), first):
            raise CheckpointError(f"the checkpoint stores different rotary inverse frequencies in {found[0]} and "
                                  f"{name}; biotf uses one set for every layer")
    return {"positions.inverse_frequency": first.to(torch.float32)}


# --- Qwen2 -> biotf -------------------------------------------------------------------------------
def qwen2_config(hf: Mapping[str, Any]) -> TransformerConfig:
    """A TransformerConfig that computes what this Qwen2 config.json describes; refuses what it cannot."""

    def refuse(key: str, value: Any, reason: str) -> CheckpointError:
        return CheckpointError(f"Qwen2 config {key}={value!r} is not supported: {reason}")

    rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise refuse("rope_type", rope_type, "only plain RoPE (rope_type default) is implemented")
    rope_theta = rope.get("rope_theta", hf.get("rope_theta", 10000.0))
    if hf.get("use_sliding_window"):
        raise refuse("use_sliding_window", True, "sliding-window attention is not implemented")
    if hf.get("hidden_act", "silu") != "silu":
        raise refuse("hidden_act", hf.get("hidden_act"), "Qwen2 uses silu (SwiGLU)")
    d_model, n_heads = hf["hidden_size"], hf["num_attention_heads"]
    head_dim = hf.get("head_dim") or d_model // n_heads
    if head_dim * n_heads != d_model:
        raise refuse("head_dim", head_dim, f"biotf needs head_dim = hidden_size / num_attention_heads "
                                           f"= {d_model // n_heads}")
    return TransformerConfig(
        vocab_size=hf["vocab_size"], d_model=d_model, n_layers=hf["num_hidden_layers"], n_heads=n_heads,
        n_kv_heads=hf.get("num_key_value_heads") or n_heads, d_ff=hf["intermediate_size"],
        max_seq_len=hf.get("max_position_embeddings"), dropout=float(hf.get("attention_dropout", 0.0)),
        pos="rope", rope_theta=float(rope_theta), norm="rmsnorm", norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        norm_position="pre", mlp="swiglu", qkv_bias=True, bias=False,
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)), causal=True, scale_embeddings=False,
        init_std=float(hf.get("initializer_range", 0.02)))


def qwen2_to_biotf(weights: Mapping[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
    """Rename and fuse Qwen2 tensors into a biotf state dict (q, k, v rows stacked into qkv; gate, up into gate_up)."""
    # Look tensors up one at a time (never copy the mapping): a lazy `SafetensorsWeights` then frees each
    # source as soon as it is fused. "_orig_mod." prefixes a torch.compile'd model's names.
    prefix = "_orig_mod." if any(name.startswith("_orig_mod.") for name in weights) else ""

    def take(name: str) -> torch.Tensor:
        if prefix + name not in weights:
            raise CheckpointError(f"Qwen2 checkpoint lacks tensor {name!r}")
        return weights[prefix + name]

    state = {"embed.weight": take("model.embed_tokens.weight"), "final_norm.weight": take("model.norm.weight")}
    for i in range(config.n_layers):
        hf, ours = f"model.layers.{i}.", f"blocks.{i}."
        attention = hf + "self_attn."
        state[ours + "attn_norm.weight"] = take(hf + "input_layernorm.weight")
        state[ours + "attn.qkv.weight"] = torch.cat([take(attention + f"{p}_proj.weight") for p in "qkv"])
        state[ours + "attn.qkv.bias"] = torch.cat([take(attention + f"{p}_proj.bias") for p in "qkv"])
        state[ours + "attn.out.weight"] = take(attention + "o_proj.weight")
        state[ours + "mlp_norm.weight"] = take(hf + "post_attention_layernorm.weight")
        state[ours + "mlp.gate_up.weight"] = torch.cat([take(hf + "mlp.gate_proj.weight"),
                                                        take(hf + "mlp.up_proj.weight")])
        state[ours + "mlp.down.weight"] = take(hf + "mlp.down_proj.weight")
    if not config.tie_embeddings:
        state["lm_head.weight"] = take("lm_head.weight")
    rotary = r"(_orig_mod\.)?model\.(layers\.(\d+|\*)\.self_attn\.)?rotary_emb\.inv_freq"
    return {**state, **stored_inverse_frequency(weights, rotary, config)}


# --- ESM -> biotf ---------------------------------------------------------------------------------
ESM_POSITIONS = {"rotary": "rope", "absolute": "learned"}


def esm_prefix(weights: Mapping[str, torch.Tensor]) -> str:
    """What precedes `embeddings.word_embeddings.weight`: "esm." in a model with a head, "" in a bare EsmModel,
    each after the "_orig_mod." of a torch.compile'd model."""
    for prefix in ("esm.", "", "_orig_mod.esm.", "_orig_mod."):
        if prefix + "embeddings.word_embeddings.weight" in weights:
            return prefix
    raise CheckpointError("not an ESM checkpoint: no embeddings.word_embeddings.weight, with or without 'esm.'")


# The ESM architectures biotf loads; all but EsmForMaskedLM load as an encoder without LM head.
ESM_ARCHITECTURES = ("EsmForMaskedLM", "EsmModel", "EsmForSequenceClassification", "EsmForTokenClassification")


def esm_config(hf: Mapping[str, Any]) -> TransformerConfig:
    """A TransformerConfig that computes what this ESM config.json describes (HF `EsmForMaskedLM`, or the encoder
    without LM head of the other `ESM_ARCHITECTURES`; no `architectures` means EsmForMaskedLM, as hub ESM-2s).

    Absolute positions (ESM-1b) load as a learned table without its first pad id + 1 rows: HF numbers the
    real tokens from padding_idx + 1 (fairseq's `make_positions`), biotf from 0.
    """

    def refuse(key: str, value: Any, reason: str) -> CheckpointError:
        return CheckpointError(f"ESM config {key}={value!r} is not supported: {reason}")

    position_type = hf.get("position_embedding_type", "absolute")
    if position_type not in ESM_POSITIONS:
        raise refuse("position_embedding_type", position_type, f"biotf loads {' | '.join(ESM_POSITIONS)} positions")
    if hf.get("is_folding_model"):
        raise refuse("is_folding_model", True, "ESMFold's structure module is not a transformer biotf runs")
    if hf.get("is_decoder") or hf.get("add_cross_attention"):
        raise refuse("is_decoder", True, "biotf loads ESM as the bidirectional masked-LM encoder it was trained as")
    d_model, n_heads = hf["hidden_size"], hf["num_attention_heads"]
    if d_model % n_heads:
        raise refuse("hidden_size", d_model, f"not a multiple of num_attention_heads={n_heads}")
    max_positions = hf.get("max_position_embeddings")
    if position_type == "absolute":
        max_positions -= hf["pad_token_id"] + 1
    token_dropout = bool(hf.get("token_dropout", False))
    architectures = hf.get("architectures") or ["EsmForMaskedLM"]
    if not set(architectures) & set(ESM_ARCHITECTURES):
        raise refuse("architectures", architectures, f"biotf loads {' | '.join(ESM_ARCHITECTURES)}")
    lm_head = "EsmForMaskedLM" in architectures
    return TransformerConfig(
        vocab_size=hf["vocab_size"], d_model=d_model, n_layers=hf["num_hidden_layers"], n_heads=n_heads,
        n_kv_heads=n_heads, d_ff=hf["intermediate_size"], max_seq_len=max_positions,
        dropout=float(hf.get("hidden_dropout_prob") or 0.0), pos=ESM_POSITIONS[position_type],
        rope_theta=float(hf.get("rope_theta", 10000.0)), norm="layernorm",
        norm_eps=float(hf.get("layer_norm_eps") or 1e-12), norm_position="pre", mlp="gelu", qkv_bias=True,
        bias=True, tie_embeddings=bool(hf.get("tie_word_embeddings", True)), causal=False, scale_embeddings=False,
        token_dropout=token_dropout, mask_token_id=hf.get("mask_token_id") if token_dropout else None,
        embed_norm=bool(hf.get("emb_layer_norm_before")), lm_head=lm_head, lm_head_transform=lm_head,
        lm_head_bias=lm_head,
        init_std=float(hf.get("initializer_range", 0.02)))


def esm_to_biotf(weights: Mapping[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
    """Rename and fuse ESM tensors into a biotf state dict. The `esm.` prefix is absent in a bare `EsmModel`; the
    contact head is read when present (its regression is named as in fair-esm), the pooler and classifier are not."""
    prefix = esm_prefix(weights)
    head_prefix = prefix.removesuffix("esm.")

    def take(name: str, at: str = prefix) -> torch.Tensor:
        if at + name not in weights:
            raise CheckpointError(f"ESM checkpoint lacks tensor {at + name!r}")
        return weights[at + name]

    def norm(hf_name: str, ours: str, at: str = prefix) -> dict[str, torch.Tensor]:
        legacy = at + hf_name + ".gamma" in weights  # how transformers 5 still saves the per-layer norms
        return {ours + ".weight": take(hf_name + (".gamma" if legacy else ".weight"), at),
                ours + ".bias": take(hf_name + (".beta" if legacy else ".bias"), at)}

    def linear(hf_name: str, ours: str, at: str = prefix) -> dict[str, torch.Tensor]:
        return {ours + ".weight": take(hf_name + ".weight", at), ours + ".bias": take(hf_name + ".bias", at)}

    # HF applies emb_layer_norm_after after the last layer always: it is biotf's Pre-LN final norm.
    state = {"embed.weight": take("embeddings.word_embeddings.weight"),
             **norm("encoder.emb_layer_norm_after", "final_norm")}
    if config.lm_head:
        if head_prefix + "lm_head.dense.weight" not in weights:
            raise CheckpointError("ESM checkpoint has no masked-LM head (lm_head.*) although its config.json says "
                                  "EsmForMaskedLM; set architectures to EsmModel to load the encoder alone")
        state.update(linear("lm_head.dense", "head_transform.dense", head_prefix))
        state.update(norm("lm_head.layer_norm", "head_transform.norm", head_prefix))
        state["lm_head_bias"] = take("lm_head.bias", head_prefix)
        if not config.tie_embeddings:
            state["lm_head.weight"] = take("lm_head.decoder.weight", head_prefix)
    if config.pos == "learned":
        # The table's last max_seq_len rows: HF's rows 0..pad id serve padding only (see `esm_config`).
        state["positions.table.weight"] = take("embeddings.position_embeddings.weight")[-config.max_seq_len:]
    if config.embed_norm:
        state.update(norm("embeddings.layer_norm", "embed_norm"))
    for i in range(config.n_layers):
        hf_layer, ours = f"encoder.layer.{i}.", f"blocks.{i}."
        attention = hf_layer + "attention.self."
        state.update(norm(hf_layer + "attention.LayerNorm", ours + "attn_norm"))
        for kind in ("weight", "bias"):
            state[ours + f"attn.qkv.{kind}"] = torch.cat([take(attention + f"{p}.{kind}") for p in
                                                         ("query", "key", "value")])
        state.update(linear(hf_layer + "attention.output.dense", ours + "attn.out"))
        state.update(norm(hf_layer + "LayerNorm", ours + "mlp_norm"))
        state.update(linear(hf_layer + "intermediate.dense", ours + "mlp.up"))
        state.update(linear(hf_layer + "output.dense", ours + "mlp.down"))
    if prefix + "contact_head.regression.weight" in weights:
        state.update(linear("contact_head.regression", "contact_head.regression"))
    rotary = re.escape(prefix) + r"(encoder\.layer\.(\d+|\*)\.attention\.self\.)?rotary_embeddings\.inv_freq"
    return {**state, **stored_inverse_frequency(weights, rotary, config)}


# --- biotf -> Qwen2 -------------------------------------------------------------------------------
# The fields a biotf config must have to be a Qwen2 model (qkv_bias may be False: zero biases are written).
QWEN2_SHAPE = dict(pos="rope", norm="rmsnorm", norm_position="pre", mlp="swiglu", bias=False, causal=True,
                   scale_embeddings=False)


def biotf_to_qwen2_config(config: TransformerConfig) -> dict[str, Any]:
    for key, needed in QWEN2_SHAPE.items():
        if getattr(config, key) != needed:
            raise CheckpointError(f"cannot write a Qwen2 checkpoint: config {key}={getattr(config, key)!r}, "
                                  f"Qwen2 needs {key}={needed!r}")
    return {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
        "vocab_size": config.vocab_size, "hidden_size": config.d_model, "intermediate_size": config.d_ff,
        "num_hidden_layers": config.n_layers, "num_attention_heads": config.n_heads,
        "num_key_value_heads": config.n_kv_heads, "head_dim": config.head_dim, "hidden_act": "silu",
        "max_position_embeddings": config.max_seq_len or 32768, "rms_norm_eps": config.norm_eps,
        # Both spellings: transformers >= 5 reads rope_parameters, 4.x reads rope_theta.
        "rope_theta": config.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_theta},
        "tie_word_embeddings": config.tie_embeddings, "attention_dropout": config.dropout,
        "initializer_range": config.init_std, "use_sliding_window": False, "sliding_window": None,
        "max_window_layers": config.n_layers, "use_cache": True, "torch_dtype": "float32", "dtype": "float32",
    }


def biotf_to_qwen2(state: Mapping[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
    """Split and rename a biotf state dict into Qwen2 tensors (the inverse of `qwen2_to_biotf`)."""
    q_rows, kv_rows = config.n_heads * config.head_dim, config.n_kv_heads * config.head_dim
    ff = config.d_ff
    out = {"model.embed_tokens.weight": state["embed.weight"], "model.norm.weight": state["final_norm.weight"]}
    for i in range(config.n_layers):
        hf, ours = f"model.layers.{i}.", f"blocks.{i}."
        attention = hf + "self_attn."
        out[hf + "input_layernorm.weight"] = state[ours + "attn_norm.weight"]
        qkv = state[ours + "attn.qkv.weight"]
        qkv_bias = state.get(ours + "attn.qkv.bias")
        if qkv_bias is None:  # a biotf model without q/k/v bias is a Qwen2 model with zero biases
            qkv_bias = qkv.new_zeros(qkv.shape[0])
        for name, rows in zip("qkv", (slice(0, q_rows), slice(q_rows, q_rows + kv_rows),
                                      slice(q_rows + kv_rows, q_rows + 2 * kv_rows))):
            out[attention + f"{name}_proj.weight"] = qkv[rows]
            out[attention + f"{name}_proj.bias"] = qkv_bias[rows]
        out[attention + "o_proj.weight"] = state[ours + "attn.out.weight"]
        out[hf + "post_attention_layernorm.weight"] = state[ours + "mlp_norm.weight"]
        gate_up = state[ours + "mlp.gate_up.weight"]
        out[hf + "mlp.gate_proj.weight"], out[hf + "mlp.up_proj.weight"] = gate_up[:ff], gate_up[ff:]
        out[hf + "mlp.down_proj.weight"] = state[ours + "mlp.down.weight"]
    if not config.tie_embeddings:
        out["lm_head.weight"] = state["lm_head.weight"]
    frequency = state.get("positions.inverse_frequency")
    if frequency is not None and not torch.equal(frequency.cpu(), rope_inverse_frequency(config.head_dim,
                                                                                         config.rope_theta)):
        # Only frequencies that rope_theta does not give (read from a checkpoint) are written; transformers ignores
        # the tensor, biotf reads it back.
        out["model.rotary_emb.inv_freq"] = frequency
    return out


# --- entry points -----------------------------------------------------------------------------
FAMILIES: dict[str, tuple[Callable[[Mapping[str, Any]], TransformerConfig],
                         Callable[[Mapping[str, torch.Tensor], TransformerConfig], dict[str, torch.Tensor]]]] = {
    "qwen2": (qwen2_config, qwen2_to_biotf),
    "esm": (esm_config, esm_to_biotf),
}


# How a parameter is materialised from its source tensor: (meta model, name, source, dtype) -> tensor.
Materialise = Callable[[nn.Module, str, torch.Tensor, torch.dtype], torch.Tensor]


def load_hf(model_class: type[Transformer], model_or_directory: Any, dtype: torch.dtype = torch.float32,
            materialise: Materialise | None = None) -> Transformer:
    """A `model_class` (biotf's Transformer) with the weights of a HF model object or model directory (see module
    docstring). Each parameter is `materialise(model, name, source, dtype)` (default `source.to(dtype)`), one at a
    time: a conversion that copies (a wider dtype, another memory layout) then holds one extra tensor at most."""
    if isinstance(model_or_directory, (str, PathLike)):
        directory = Path(model_or_directory)
        if not directory.is_dir():
            raise CheckpointError(f"{directory} is not a directory")
        hf_config = read_hf_config(directory)
        weights = None
    elif hasattr(model_or_directory, "config") and hasattr(model_or_directory, "state_dict"):
        hf_config, weights = _hf_object_config_and_weights(model_or_directory)
        directory = None
    else:
        raise CheckpointError(f"from_hf needs a transformers model or a directory, got "
                              f"{type(model_or_directory).__name__}")
    model_type = hf_config.get("model_type")
    if model_type not in FAMILIES:
        raise CheckpointError(f"model_type {model_type!r} is not supported (supported: {', '.join(FAMILIES)})")
    make_config, convert = FAMILIES[model_type]
    try:
        config = make_config(hf_config)
    except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError) as error:
        if directory is None:
            raise  # a transformers model object's config: not the user's file
        reason = f"it has no {error}" if isinstance(error, KeyError) else str(error)
        raise CheckpointError(f"{directory / CONFIG_FILE} does not describe a {model_type} model biotf can build: "
                              f"{reason}") from None
    if weights is None:
        weights = read_weights(directory, dtype)
    state = convert(weights, config)
    del weights  # the sources of fused tensors go now, not at return
    if not config.contact_head and any(name.startswith("contact_head.") for name in state):
        config = config.replace(contact_head=True)  # a head the weights carry (ESM-2's), not one config.json names
    with torch.device("meta"):
        model = model_class(config)
    expected = model.state_dict()
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise CheckpointError(f"tensor for {name} has shape {tuple(tensor.shape)}, the config implies "
                                  f"{tuple(expected[name].shape)}")
    # One tensor at a time, each source dropped as it goes. Tensors read from files are fresh (memory-mapped
    # copy-on-write); those of a model object are copied so that the two never share.
    # Parameters take `dtype`; buffers keep the dtype the model gives them (rotary frequencies stay float32).
    parameters = dict(model.named_parameters())
    for name in list(state):
        source = state.pop(name).detach()
        if name not in parameters:
            tensor = source.to(dtype=expected[name].dtype)
        else:
            tensor = source.to(dtype=dtype) if materialise is None else materialise(model, name, source, dtype)
        state[name] = tensor.clone() if directory is None and tensor is source else tensor
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval()


def save_hf(model: Transformer, directory: str | PathLike) -> None:
    """Write `model` as a Qwen2 checkpoint: config.json + model.safetensors (float tensors as they are)."""
    from safetensors.torch import save_file

    hf_config = biotf_to_qwen2_config(model.config)
    tensors = biotf_to_qwen2(model.state_dict(), model.config)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    dtypes = {t.dtype for t in tensors.values()}
    if len(dtypes) == 1:
        hf_config["torch_dtype"] = hf_config["dtype"] = str(dtypes.pop()).removeprefix("torch.")
    save_file({name: t.detach().contiguous().cpu() for name, t in tensors.items()}, directory / WEIGHTS_FILE,
              metadata={"format": "pt"})
    (directory / CONFIG_FILE).write_text(json.dumps(hf_config, indent=2) + "\n")
