"""Qwen2 (`model_type: qwen2`, `Qwen2ForCausalLM`) <-> biotf: RoPE, RMSNorm, SwiGLU, grouped-query attention with
q/k/v bias, Pre-LN. Both directions: a biotf model of this shape is written as a Qwen2 checkpoint."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from biotf.errors import CheckpointError
from biotf.model.config import TransformerConfig
from biotf.model.hf.family import Family
from biotf.model.hf.weights import stored_inverse_frequency
from biotf.model.positions import rope_inverse_frequency


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


# --- biotf -> Qwen2 ---------------------------------------------------------------------------
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


FAMILY = Family("qwen2", architectures=("Qwen2ForCausalLM",), causal=("Qwen2ForCausalLM",), config=qwen2_config,
                to_biotf=qwen2_to_biotf, export_config=biotf_to_qwen2_config, from_biotf=biotf_to_qwen2)
