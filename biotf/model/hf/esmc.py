"""ESM C (`model_type: esmc`) <-> biotf: `EsmcForMaskedLM`, and as an encoder without LM head (`lm_head: false`)
`EsmcModel`, `EsmcForSequenceClassification` and `EsmcForTokenClassification`, whose classifier is not read.
Written back as `EsmcForMaskedLM`, or `EsmcModel` without LM head.

What an ESM C is in biotf's config (transformers' `modeling_esmc`): a Pre-LN bidirectional encoder with RoPE (HF's
rotate_half layout) and a SwiGLU MLP, plus four things of its own, each a general switch of the transformer:
- a LayerNorm without bias on q and on k over their full width, before the heads are split (`qk_norm`);
- every residual branch divided by sqrt(n_layers / 36), ESM3's residue scaling (`residual_scale`, its inverse);
- LayerNorms with a bias in the blocks (`norm_bias: true`) and none on the final norm (`final_norm_bias: false`),
  while the projections have a bias only with attention_bias / mlp_bias (`qkv_bias`, `bias`);
- the masked-LM head dense -> GELU -> LayerNorm -> decoder, every part with a bias (`lm_head_transform_bias: true`,
  `lm_head_bias`), the decoder a matrix of its own: transformers never ties it, whatever tie_word_embeddings says.
Every norm has torch's default epsilon, 1e-5 (config.json names none). HF numbers positions 0, 1, ... in every row and
biotf counts real tokens: the same on right-padded rows. Rotary frequencies come from rope_theta, as in transformers,
which ignores stored ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from biotf.errors import CheckpointError
from biotf.model.config import TransformerConfig
from biotf.model.hf.encoder import Names, linear, read, write
from biotf.model.hf.family import Family, check_holds, read_architectures, refuser, trunk_prefix
from biotf.model.positions import rope_inverse_frequency

ESMC_ARCHITECTURES = ("EsmcForMaskedLM", "EsmcModel", "EsmcForSequenceClassification", "EsmcForTokenClassification")
NORM_EPS = 1e-5  # torch.nn.LayerNorm's default: every ESM C norm's
MAX_POSITIONS = 2048  # EsmcConfig's default max_position_embeddings, written for a config without max_seq_len


def residual_scale(n_layers: int) -> float:
    """What ESM C multiplies each residual branch by: 1 / sqrt(n_layers / 36) (HF `EsmcLayer.scaling_factor`)."""
    return 1 / math.sqrt(n_layers / 36)


def esmc_config(hf: Mapping[str, Any]) -> TransformerConfig:
    """A TransformerConfig that computes what this ESM C config.json describes; what the transformer cannot express
    (another rope_type or activation, grouped-query attention, a head_dim of its own) is refused naming the field."""
    refuse = refuser("ESM C")
    rope = hf.get("rope_parameters") or {}
    if rope.get("rope_type", "default") != "default":
        raise refuse("rope_parameters.rope_type", rope["rope_type"], "only plain RoPE (default) is implemented")
    if hf.get("hidden_act", "silu") != "silu":
        raise refuse("hidden_act", hf.get("hidden_act"), "ESM C's MLP is SwiGLU (silu)")
    d_model, n_heads = hf["hidden_size"], hf["num_attention_heads"]
    if d_model % n_heads:
        raise refuse("hidden_size", d_model, f"not a multiple of num_attention_heads={n_heads}")
    if (hf.get("head_dim") or d_model // n_heads) != d_model // n_heads:
        raise refuse("head_dim", hf["head_dim"], "biotf needs hidden_size / num_attention_heads = "
                                                 f"{d_model // n_heads}")
    if (hf.get("num_key_value_heads") or n_heads) != n_heads:
        raise refuse("num_key_value_heads", hf["num_key_value_heads"], f"ESM C has no grouped-query attention: it "
                     f"must equal num_attention_heads={n_heads}")
    attention_bias, mlp_bias = bool(hf.get("attention_bias", False)), bool(hf.get("mlp_bias", False))
    if attention_bias != mlp_bias:
        raise refuse("mlp_bias", mlp_bias, f"biotf has one bias switch for o_proj and the MLP, so mlp_bias must equal "
                                           f"attention_bias={attention_bias}")
    architectures = read_architectures(hf, ESMC_ARCHITECTURES, refuse)
    lm_head = "EsmcForMaskedLM" in architectures
    return TransformerConfig(
        vocab_size=hf["vocab_size"], d_model=d_model, n_layers=hf["num_hidden_layers"], n_heads=n_heads,
        n_kv_heads=n_heads, d_ff=hf["intermediate_size"], max_seq_len=hf.get("max_position_embeddings"),
        dropout=float(hf.get("attention_dropout") or 0.0), pos="rope",
        rope_theta=float(rope.get("rope_theta", hf.get("rope_theta", 10000.0))), norm="layernorm", norm_eps=NORM_EPS,
        norm_position="pre", mlp="swiglu", qkv_bias=attention_bias, bias=attention_bias, tie_embeddings=False,
        causal=False, lm_head=lm_head, lm_head_transform=lm_head, lm_head_bias=lm_head,
        init_std=float(hf.get("initializer_range", 0.02)), qk_norm=True,
        residual_scale=residual_scale(hf["num_hidden_layers"]), norm_bias=True, final_norm_bias=False,
        lm_head_transform_bias=True if lm_head else None)


def tensor_names(config: TransformerConfig, trunk: str, head: str) -> Names:
    """biotf name -> HF name of every ESM C tensor, the encoder's under `trunk`, the LM head's under `head`."""
    renamed = {"embed.weight": trunk + "embed_tokens.weight", "final_norm.weight": trunk + "norm.weight"}
    fused: dict[str, tuple[str, ...]] = {}
    for i in range(config.n_layers):
        hf, ours = f"{trunk}layers.{i}.", f"blocks.{i}."
        attention, mlp = hf + "self_attn.", hf + "mlp."
        renamed.update({**linear(ours + "attn_norm", hf + "input_layernorm"),
                        **linear(ours + "mlp_norm", hf + "post_attention_layernorm"),
                        ours + "attn.q_norm.weight": attention + "q_norm.weight",
                        ours + "attn.k_norm.weight": attention + "k_norm.weight"})
        for kind in ("weight", "bias") if config.bias else ("weight",):
            fused[f"{ours}attn.qkv.{kind}"] = tuple(f"{attention}{part}_proj.{kind}" for part in "qkv")
            fused[f"{ours}mlp.gate_up.{kind}"] = (f"{mlp}gate_proj.{kind}", f"{mlp}up_proj.{kind}")
            renamed.update({f"{ours}attn.out.{kind}": f"{attention}o_proj.{kind}",
                            f"{ours}mlp.down.{kind}": f"{mlp}down_proj.{kind}"})
    if config.lm_head:
        renamed.update({**linear("head_transform.dense", head + "lm_head.dense"),
                        **linear("head_transform.norm", head + "lm_head.layer_norm"),
                        "lm_head.weight": head + "lm_head.decoder.weight",
                        "lm_head_bias": head + "lm_head.decoder.bias"})
    return Names(renamed, fused)


def esmc_to_biotf(weights: Mapping[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
    """Rename and fuse ESM C tensors into a biotf state dict; a bare `EsmcModel`'s have no `esmc.` prefix, a
    torch.compile'd model's an `_orig_mod.` before it."""
    anchor = "embed_tokens.weight"
    trunk = trunk_prefix(weights, "ESM C", "esmc.", anchor)
    head = trunk.removesuffix("esmc.")
    if config.lm_head and head + "lm_head.dense.weight" not in weights:
        raise CheckpointError("ESM C checkpoint has no masked-LM head (lm_head.*) although its config.json says "
                              "EsmcForMaskedLM; set architectures to EsmcModel to load the encoder alone")
    return read(weights, tensor_names(config, trunk, head), "ESM C")


# --- biotf -> ESM C ---------------------------------------------------------------------------
# Fields ESM C's config.json writes (or that mean nothing to it: mask_token_id, residual_scale checked apart).
ESMC_FREE = ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_seq_len", "dropout", "rope_theta", "bias",
             "tie_embeddings", "mask_token_id", "lm_head", "init_std", "residual_scale")


def biotf_to_esmc_config(config: TransformerConfig) -> dict[str, Any]:
    """The config.json of an `EsmcForMaskedLM` (`EsmcModel` without LM head) that computes what `config` does; what
    ESM C cannot hold is refused naming the field. A tied LM head is written as the decoder's own copy."""
    with_bias = (True, None) if config.bias else (True,)  # null follows `bias`
    shape: dict[str, tuple[Any, ...]] = {
        "pos": ("rope",), "norm": ("layernorm",), "norm_eps": (NORM_EPS,), "norm_position": ("pre",),
        "mlp": ("swiglu",), "n_kv_heads": (config.n_heads,), "qkv_bias": (config.bias,), "causal": (False,),
        "qk_norm": (True,), "norm_bias": with_bias, "final_norm_bias": (False,),
        "lm_head_transform": (config.lm_head,), "lm_head_bias": (config.lm_head,),
        "lm_head_transform_bias": with_bias if config.lm_head else (None,)}
    check_holds(config, "ESM C", shape, ESMC_FREE)
    expected = residual_scale(config.n_layers)
    if not math.isclose(config.residual_scale, expected, rel_tol=1e-12):
        raise CheckpointError(f"cannot write an ESM C checkpoint: config residual_scale={config.residual_scale!r}, "
                              f"ESM C with n_layers={config.n_layers} needs residual_scale={expected!r} "
                              "(1 / sqrt(n_layers / 36))")
    hf = {
        "architectures": ["EsmcForMaskedLM" if config.lm_head else "EsmcModel"], "model_type": "esmc",
        "vocab_size": config.vocab_size, "hidden_size": config.d_model, "intermediate_size": config.d_ff,
        "num_hidden_layers": config.n_layers, "num_attention_heads": config.n_heads,
        "num_key_value_heads": config.n_heads, "head_dim": config.head_dim, "hidden_act": "silu",
        "max_position_embeddings": config.max_seq_len or MAX_POSITIONS,
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_theta},
        "attention_bias": config.bias, "mlp_bias": config.bias, "attention_dropout": config.dropout,
        "initializer_range": config.init_std, "tie_word_embeddings": False, "torch_dtype": "float32",
        "dtype": "float32"}
    if config.mask_token_id is not None:
        hf["mask_token_id"] = config.mask_token_id
    return hf


def biotf_to_esmc(state: Mapping[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
    """ESM C tensors of a biotf state dict (the inverse of `esmc_to_biotf`). Rotary frequencies other than
    rope_theta's are refused: transformers recomputes them."""
    frequency = state.get("positions.inverse_frequency")
    if frequency is not None and not torch.equal(frequency.cpu(), rope_inverse_frequency(config.head_dim,
                                                                                         config.rope_theta)):
        raise CheckpointError("cannot write an ESM C checkpoint: the model's rotary frequencies are not "
                              f"rope_theta={config.rope_theta}'s, and transformers' ESM C computes them from it")
    if config.lm_head and config.tie_embeddings:
        state = {**state, "lm_head.weight": state["embed.weight"].clone()}
    return write(state, tensor_names(config, "esmc." if config.lm_head else "", ""))


FAMILY = Family("esmc", architectures=ESMC_ARCHITECTURES, causal=(), config=esmc_config, to_biotf=esmc_to_biotf,
                export_config=biotf_to_esmc_config, from_biotf=biotf_to_esmc)
