"""The Llama-style families <-> biotf: `Qwen2ForCausalLM`, `LlamaForCausalLM`, `MistralForCausalLM`. Both directions.

One recipe: RoPE (HF's rotate_half layout), RMSNorm, SwiGLU, grouped-query attention, Pre-LN, an optional untied
LM head. What differs between the three is data (`Variant`):
- Qwen2: a bias on q/k/v (always), none elsewhere; its sliding window (`use_sliding_window`) is refused.
- Llama: `attention_bias` puts a bias on q/k/v and o, `mlp_bias` on gate/up/down. biotf's `qkv_bias` is the first,
  its `bias` covers o and the MLP together: both flags off or both on load, one without the other is refused.
- Mistral: no bias; `sliding_window` (keys within that many positions of the query, itself included) is biotf's
  `sliding_window`.
`rope_scaling` other than plain RoPE, and a head_dim other than hidden_size / num_attention_heads, are refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any, NamedTuple

import torch

from biotf.errors import CheckpointError
from biotf.model.config import TransformerConfig
from biotf.model.hf.family import Family, check_holds, refuser, tensor_reader
from biotf.model.hf.weights import stored_inverse_frequency
from biotf.model.positions import rope_inverse_frequency


class Variant(NamedTuple):
    """What one Llama-style model_type has of its own. `biases`: "qkv" (q/k/v always have one, nothing else: Qwen2),
    "flags" (config.json's attention_bias / mlp_bias: Llama) or "none" (Mistral). `sliding_window`: config.json's
    sliding_window is read and written (Mistral)."""

    model_type: str
    name: str
    architecture: str
    biases: str
    sliding_window: bool


QWEN2 = Variant("qwen2", "Qwen2", "Qwen2ForCausalLM", biases="qkv", sliding_window=False)
LLAMA = Variant("llama", "Llama", "LlamaForCausalLM", biases="flags", sliding_window=False)
MISTRAL = Variant("mistral", "Mistral", "MistralForCausalLM", biases="none", sliding_window=True)


def read_biases(variant: Variant, hf: Mapping[str, Any]) -> tuple[bool, bool]:
    """(qkv_bias, bias) of biotf for this config.json."""
    if variant.biases == "qkv":
        return True, False
    if variant.biases == "none":
        return False, False
    attention, mlp = bool(hf.get("attention_bias", False)), bool(hf.get("mlp_bias", False))
    if attention != mlp:
        raise refuser(variant.name)("mlp_bias", mlp, f"biotf has one bias switch for o_proj and the MLP, so mlp_bias "
                                                     f"must equal attention_bias={attention}")
    return attention, attention


def llama_style_config(variant: Variant, hf: Mapping[str, Any]) -> TransformerConfig:
    """A TransformerConfig that computes what this config.json describes; refuses what it cannot."""
    refuse = refuser(variant.name)
    rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise refuse("rope_type", rope_type, "only plain RoPE (rope_type default) is implemented")
    rope_theta = rope.get("rope_theta", hf.get("rope_theta", 10000.0))
    if hf.get("use_sliding_window"):
        raise refuse("use_sliding_window", True, "Qwen2's per-layer sliding windows (max_window_layers) are not "
                                                 "implemented")
    if hf.get("hidden_act", "silu") != "silu":
        raise refuse("hidden_act", hf.get("hidden_act"), f"{variant.name} uses silu (SwiGLU)")
    d_model, n_heads = hf["hidden_size"], hf["num_attention_heads"]
    head_dim = hf.get("head_dim") or d_model // n_heads
    if head_dim * n_heads != d_model:
        raise refuse("head_dim", head_dim, f"biotf needs head_dim = hidden_size / num_attention_heads "
                                           f"= {d_model // n_heads}")
    qkv_bias, bias = read_biases(variant, hf)
    return TransformerConfig(
        vocab_size=hf["vocab_size"], d_model=d_model, n_layers=hf["num_hidden_layers"], n_heads=n_heads,
        n_kv_heads=hf.get("num_key_value_heads") or n_heads, d_ff=hf["intermediate_size"],
        max_seq_len=hf.get("max_position_embeddings"), dropout=float(hf.get("attention_dropout", 0.0)),
        pos="rope", rope_theta=float(rope_theta), norm="rmsnorm", norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        norm_position="pre", mlp="swiglu", qkv_bias=qkv_bias, bias=bias,
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)), causal=True, scale_embeddings=False,
        init_std=float(hf.get("initializer_range", 0.02)),
        sliding_window=hf.get("sliding_window") if variant.sliding_window else None)


def llama_style_to_biotf(variant: Variant, weights: Mapping[str, torch.Tensor],
                         config: TransformerConfig) -> dict[str, torch.Tensor]:
    """Rename and fuse tensors into a biotf state dict (q, k, v rows stacked into qkv; gate, up into gate_up)."""
    # Look tensors up one at a time (never copy the mapping): a lazy `SafetensorsWeights` then frees each
    # source as soon as it is fused. "_orig_mod." prefixes a torch.compile'd model's names.
    take, prefix = tensor_reader(weights, variant.name, ("", "_orig_mod."), "model.embed_tokens.weight")
    model = prefix + "model."
    state = {"embed.weight": take(model + "embed_tokens.weight"), "final_norm.weight": take(model + "norm.weight")}
    for i in range(config.n_layers):
        hf, ours = f"{model}layers.{i}.", f"blocks.{i}."
        attention = hf + "self_attn."
        state[ours + "attn_norm.weight"] = take(hf + "input_layernorm.weight")
        state[ours + "mlp_norm.weight"] = take(hf + "post_attention_layernorm.weight")
        for kind in ("weight", "bias") if config.qkv_bias else ("weight",):
            state[ours + f"attn.qkv.{kind}"] = torch.cat([take(attention + f"{p}_proj.{kind}") for p in "qkv"])
        for kind in ("weight", "bias") if config.bias else ("weight",):
            state[ours + f"attn.out.{kind}"] = take(attention + f"o_proj.{kind}")
            state[ours + f"mlp.gate_up.{kind}"] = torch.cat([take(hf + f"mlp.gate_proj.{kind}"),
                                                             take(hf + f"mlp.up_proj.{kind}")])
            state[ours + f"mlp.down.{kind}"] = take(hf + f"mlp.down_proj.{kind}")
    if not config.tie_embeddings:
        state["lm_head.weight"] = take(prefix + "lm_head.weight")
    rotary = r"(_orig_mod\.)?model\.(layers\.(\d+|\*)\.self_attn\.)?rotary_emb\.inv_freq"
    return {**state, **stored_inverse_frequency(weights, rotary, config)}


# --- biotf -> Llama-style ------------------------------------------------------------------------
LLAMA_STYLE_SHAPE = {"pos": ("rope",), "norm": ("rmsnorm",), "norm_position": ("pre",), "mlp": ("swiglu",)}
# Fields the config.json of every variant writes (or that mean nothing to it: mask_token_id).
LLAMA_STYLE_FREE = ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "max_seq_len", "dropout",
                    "rope_theta", "norm_eps", "tie_embeddings", "mask_token_id", "init_std")
# Per bias kind: what else of a biotf config the variant holds, and the fields it writes besides the shared ones.
VARIANT_SHAPE = {"qkv": {"bias": (False,)}, "flags": {}, "none": {"qkv_bias": (False,), "bias": (False,)}}
VARIANT_FREE = {"qkv": ("qkv_bias",), "flags": ("qkv_bias", "bias"), "none": ()}


def llama_style_export_config(variant: Variant, config: TransformerConfig) -> dict[str, Any]:
    free = LLAMA_STYLE_FREE + VARIANT_FREE[variant.biases] + (("sliding_window",) if variant.sliding_window else ())
    check_holds(config, variant.name, {**LLAMA_STYLE_SHAPE, **VARIANT_SHAPE[variant.biases]}, free)
    if variant.biases == "flags" and config.qkv_bias != config.bias:
        raise CheckpointError(f"cannot write a {variant.name} checkpoint: config qkv_bias={config.qkv_bias} and "
                              f"bias={config.bias}, {variant.name}'s attention_bias sets both")
    hf = {
        "architectures": [variant.architecture], "model_type": variant.model_type,
        "vocab_size": config.vocab_size, "hidden_size": config.d_model, "intermediate_size": config.d_ff,
        "num_hidden_layers": config.n_layers, "num_attention_heads": config.n_heads,
        "num_key_value_heads": config.n_kv_heads, "head_dim": config.head_dim, "hidden_act": "silu",
        "max_position_embeddings": config.max_seq_len or 32768, "rms_norm_eps": config.norm_eps,
        # Both spellings: transformers >= 5 reads rope_parameters, 4.x reads rope_theta.
        "rope_theta": config.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": config.rope_theta},
        "tie_word_embeddings": config.tie_embeddings, "attention_dropout": config.dropout,
        "initializer_range": config.init_std, "use_cache": True, "torch_dtype": "float32", "dtype": "float32",
    }
    if variant.model_type == "qwen2":
        hf.update(use_sliding_window=False, sliding_window=None, max_window_layers=config.n_layers)
    if variant.biases == "flags":
        hf.update(attention_bias=config.bias, mlp_bias=config.bias, pretraining_tp=1)
    if variant.sliding_window:
        hf["sliding_window"] = config.sliding_window
    return hf


def biotf_to_llama_style(variant: Variant, state: Mapping[str, torch.Tensor],
                         config: TransformerConfig) -> dict[str, torch.Tensor]:
    """Split and rename a biotf state dict into the variant's tensors (the inverse of `llama_style_to_biotf`)."""
    q_rows, kv_rows = config.n_heads * config.head_dim, config.n_kv_heads * config.head_dim
    qkv_rows = {"q": slice(0, q_rows), "k": slice(q_rows, q_rows + kv_rows),
                "v": slice(q_rows + kv_rows, q_rows + 2 * kv_rows)}
    ff = config.d_ff
    out = {"model.embed_tokens.weight": state["embed.weight"], "model.norm.weight": state["final_norm.weight"]}
    for i in range(config.n_layers):
        hf, ours = f"model.layers.{i}.", f"blocks.{i}."
        attention = hf + "self_attn."
        out[hf + "input_layernorm.weight"] = state[ours + "attn_norm.weight"]
        out[hf + "post_attention_layernorm.weight"] = state[ours + "mlp_norm.weight"]
        qkv = state[ours + "attn.qkv.weight"]
        qkv_bias = state.get(ours + "attn.qkv.bias")
        if qkv_bias is None and variant.biases == "qkv":  # a biotf model without q/k/v bias is a Qwen2 with zero ones
            qkv_bias = qkv.new_zeros(qkv.shape[0])
        for name, rows in qkv_rows.items():
            out[attention + f"{name}_proj.weight"] = qkv[rows]
            if qkv_bias is not None:
                out[attention + f"{name}_proj.bias"] = qkv_bias[rows]
        for kind in ("weight", "bias") if config.bias else ("weight",):
            out[attention + f"o_proj.{kind}"] = state[ours + f"attn.out.{kind}"]
            gate_up = state[ours + f"mlp.gate_up.{kind}"]
            out[hf + f"mlp.gate_proj.{kind}"], out[hf + f"mlp.up_proj.{kind}"] = gate_up[:ff], gate_up[ff:]
            out[hf + f"mlp.down_proj.{kind}"] = state[ours + f"mlp.down.{kind}"]
    if not config.tie_embeddings:
        out["lm_head.weight"] = state["lm_head.weight"]
    frequency = state.get("positions.inverse_frequency")
    if frequency is not None and not torch.equal(frequency.cpu(), rope_inverse_frequency(config.head_dim,
                                                                                         config.rope_theta)):
        # Only frequencies that rope_theta does not give (read from a checkpoint) are written; transformers ignores
        # the tensor, biotf reads it back.
        out["model.rotary_emb.inv_freq"] = frequency
    return out


def family(variant: Variant) -> Family:
    """The `Family` of one variant: the functions above with the variant bound."""
    return Family(variant.model_type, architectures=(variant.architecture,), causal=(variant.architecture,),
                  config=partial(llama_style_config, variant), to_biotf=partial(llama_style_to_biotf, variant),
                  export_config=partial(llama_style_export_config, variant),
                  from_biotf=partial(biotf_to_llama_style, variant))


FAMILIES = tuple(family(variant) for variant in (QWEN2, LLAMA, MISTRAL))
