"""GPT-2 (`model_type: gpt2`, `GPT2LMHeadModel`) <-> biotf: learned positions, LayerNorm with biases, GELU in its
tanh form (HF `gelu_new`), Pre-LN, biases on every linear layer, LM head tied to the token embedding. Both directions.

GPT-2's linear layers are `Conv1D`s: weight (in, out) and y = x W + b, the transpose of nn.Linear's (out, in), so
each matrix is transposed as it is read and written. `c_attn`'s output columns are [q | k | v], each head-major: the
row order of biotf's fused `qkv` once transposed.

Position ids: HF's `GPT2Model.forward` numbers positions 0..T-1 whatever the attention mask says, so on a left-padded
batch a real token's learned position depends on its padding; `generate` instead passes position ids that count real
tokens (`attention_mask.cumsum(-1) - 1`), which biotf always does. biotf therefore equals HF's generation path, and its
plain forward on unpadded (or right-padded) input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from biotf.errors import CheckpointError
from biotf.model.config import TransformerConfig
from biotf.model.hf.family import Family, check_holds, refuser, tensor_reader

# config.json's activation_function -> biotf's mlp: gelu_new, gelu_fast and gelu_pytorch_tanh are all
# 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), written three ways.
GPT2_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
                    "gelu": "gelu", "relu": "relu"}
GPT2_WRITTEN_ACTIVATIONS = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu"}
# What precedes `wte.weight`: "transformer." in GPT2LMHeadModel, "" in a bare GPT2Model (openai-community/gpt2's
# file), each after the "_orig_mod." of a torch.compile'd model.
GPT2_PREFIXES = ("transformer.", "", "_orig_mod.transformer.", "_orig_mod.")


def gpt2_config(hf: Mapping[str, Any]) -> TransformerConfig:
    """A TransformerConfig that computes what this GPT-2 config.json describes; refuses what it cannot. The one
    dropout of biotf is GPT-2's `resid_pdrop` (training only; GPT-2 sets all three of its dropouts equal)."""
    refuse = refuser("GPT-2")
    activation = hf.get("activation_function", "gelu_new")
    if activation not in GPT2_ACTIVATIONS:
        raise refuse("activation_function", activation, f"biotf runs {' | '.join(GPT2_ACTIVATIONS)}")
    if not hf.get("scale_attn_weights", True):
        raise refuse("scale_attn_weights", False, "biotf scales attention scores by 1/sqrt(head size)")
    if hf.get("scale_attn_by_inverse_layer_idx"):
        raise refuse("scale_attn_by_inverse_layer_idx", True, "biotf scales every layer's scores alike")
    if hf.get("add_cross_attention"):
        raise refuse("add_cross_attention", True, "biotf's transformer has no cross-attention")
    d_model, n_heads = hf["n_embd"], hf["n_head"]
    if d_model % n_heads:
        raise refuse("n_embd", d_model, f"not a multiple of n_head={n_heads}")
    return TransformerConfig(
        vocab_size=hf["vocab_size"], d_model=d_model, n_layers=hf["n_layer"], n_heads=n_heads, n_kv_heads=n_heads,
        d_ff=hf.get("n_inner") or 4 * d_model, max_seq_len=hf["n_positions"],
        dropout=float(hf.get("resid_pdrop", 0.1)), pos="learned", norm="layernorm",
        norm_eps=float(hf.get("layer_norm_epsilon", 1e-5)), norm_position="pre", mlp=GPT2_ACTIVATIONS[activation],
        qkv_bias=True, bias=True, tie_embeddings=bool(hf.get("tie_word_embeddings", True)), causal=True,
        init_std=float(hf.get("initializer_range", 0.02)))


# Each block's GPT-2 module -> biotf module, and whether its matrix is a Conv1D's (stored transposed).
GPT2_LAYER = {"ln_1": ("attn_norm", False), "attn.c_attn": ("attn.qkv", True), "attn.c_proj": ("attn.out", True),
              "ln_2": ("mlp_norm", False), "mlp.c_fc": ("mlp.up", True), "mlp.c_proj": ("mlp.down", True)}


def gpt2_to_biotf(weights: Mapping[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
    """Rename GPT-2 tensors into a biotf state dict, Conv1D matrices transposed (row-major, as biotf builds them)."""
    take, prefix = tensor_reader(weights, "GPT-2", GPT2_PREFIXES, "wte.weight")
    state = {"embed.weight": take(prefix + "wte.weight"), "positions.table.weight": take(prefix + "wpe.weight"),
             "final_norm.weight": take(prefix + "ln_f.weight"), "final_norm.bias": take(prefix + "ln_f.bias")}
    for i in range(config.n_layers):
        for hf_name, (ours, conv1d) in GPT2_LAYER.items():
            weight = take(f"{prefix}h.{i}.{hf_name}.weight")
            state[f"blocks.{i}.{ours}.weight"] = weight.t().contiguous() if conv1d else weight
            state[f"blocks.{i}.{ours}.bias"] = take(f"{prefix}h.{i}.{hf_name}.bias")
    if not config.tie_embeddings:
        state["lm_head.weight"] = take(prefix.removesuffix("transformer.") + "lm_head.weight")
    return state


# --- biotf -> GPT-2 ----------------------------------------------------------------------------
GPT2_SHAPE = {"pos": ("learned",), "norm": ("layernorm",), "norm_position": ("pre",),
              "mlp": tuple(GPT2_WRITTEN_ACTIVATIONS), "qkv_bias": (True,), "bias": (True,)}
# Fields GPT-2's config.json writes (or that mean nothing to it: rope_theta, mask_token_id).
GPT2_FREE = ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "max_seq_len", "dropout",
             "rope_theta", "norm_eps", "tie_embeddings", "mask_token_id", "init_std")


def biotf_to_gpt2_config(config: TransformerConfig) -> dict[str, Any]:
    check_holds(config, "GPT-2", GPT2_SHAPE, GPT2_FREE)
    if config.n_kv_heads != config.n_heads:
        raise CheckpointError(f"cannot write a GPT-2 checkpoint: config n_kv_heads={config.n_kv_heads}, GPT-2 needs "
                              f"n_kv_heads = n_heads = {config.n_heads}")
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "vocab_size": config.vocab_size,
        "n_embd": config.d_model, "n_layer": config.n_layers, "n_head": config.n_heads, "n_inner": config.d_ff,
        "n_positions": config.max_seq_len, "activation_function": GPT2_WRITTEN_ACTIVATIONS[config.mlp],
        "layer_norm_epsilon": config.norm_eps, "resid_pdrop": config.dropout, "embd_pdrop": config.dropout,
        "attn_pdrop": config.dropout, "initializer_range": config.init_std, "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
        "tie_word_embeddings": config.tie_embeddings, "use_cache": True,
        # GPT2Config's defaults (50256, GPT-2's <|endoftext|>) would name a token this vocabulary may not have.
        "bos_token_id": None, "eos_token_id": None,
    }


def biotf_to_gpt2(state: Mapping[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
    """Rename a biotf state dict into GPT2LMHeadModel tensors (the inverse of `gpt2_to_biotf`)."""
    out = {"transformer.wte.weight": state["embed.weight"], "transformer.wpe.weight": state["positions.table.weight"],
           "transformer.ln_f.weight": state["final_norm.weight"], "transformer.ln_f.bias": state["final_norm.bias"]}
    for i in range(config.n_layers):
        for hf_name, (ours, conv1d) in GPT2_LAYER.items():
            weight = state[f"blocks.{i}.{ours}.weight"]
            out[f"transformer.h.{i}.{hf_name}.weight"] = weight.t() if conv1d else weight
            out[f"transformer.h.{i}.{hf_name}.bias"] = state[f"blocks.{i}.{ours}.bias"]
    if not config.tie_embeddings:
        out["lm_head.weight"] = state["lm_head.weight"]
    return out


FAMILY = Family("gpt2", architectures=("GPT2LMHeadModel",), causal=("GPT2LMHeadModel",), config=gpt2_config,
                to_biotf=gpt2_to_biotf, export_config=biotf_to_gpt2_config, from_biotf=biotf_to_gpt2)
