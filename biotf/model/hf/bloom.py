"""BLOOM (`model_type: bloom`, `BloomForCausalLM`) <-> biotf: ALiBi, a LayerNorm on the token embeddings
(`word_embeddings_layernorm`, biotf's `embed_norm`), LayerNorm with biases, GELU in its tanh form, Pre-LN, biases on
every linear layer, d_ff = 4 d_model, LM head tied to the token embedding. Both directions.

- ALiBi: HF adds slope_h * (key position) to the scores, biotf -slope_h * (query position - key position); the two
  differ by a constant per query row, which softmax cancels. The slopes are the same: for a head count that is not a
  power of two, those of the closest smaller power of two n followed by every other slope of 2n (HF
  `_get_alibi_slopes`, biotf `alibi_slope_values`). Positions count real tokens in both, so left padding moves nothing.
- `query_key_value` is fused per head: its rows are (head, [q, k, v], head_dim), where biotf's `qkv` rows are
  ([q, k, v], head, head_dim); the rows are permuted as they are read and written.
- BLOOM has no position limit: max_seq_len is None.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from biotf.errors import CheckpointError
from biotf.model.config import TransformerConfig
from biotf.model.hf.family import Family, check_holds, refuser, tensor_reader

# What precedes `word_embeddings.weight`: "transformer." in BloomForCausalLM, "" in a bare BloomModel (the files of
# bigscience's checkpoints), each after the "_orig_mod." of a torch.compile'd model.
BLOOM_PREFIXES = ("transformer.", "", "_orig_mod.transformer.", "_orig_mod.")
# Each block's BLOOM module -> biotf module (every one a weight and a bias).
BLOOM_LAYER = {"input_layernorm": "attn_norm", "self_attention.query_key_value": "attn.qkv",
               "self_attention.dense": "attn.out", "post_attention_layernorm": "mlp_norm",
               "mlp.dense_h_to_4h": "mlp.up", "mlp.dense_4h_to_h": "mlp.down"}


def bloom_config(hf: Mapping[str, Any]) -> TransformerConfig:
    """A TransformerConfig that computes what this BLOOM config.json describes; refuses what it cannot.
    `pretraining_tp` / `slow_but_exact` only split HF's products into slices (the same sums): they are ignored."""
    refuse = refuser("BLOOM")
    if hf.get("apply_residual_connection_post_layernorm"):
        raise refuse("apply_residual_connection_post_layernorm", True,
                     "biotf's residual stream is the block input, not its normalised form")
    d_model, n_heads = hf.get("hidden_size") or hf["n_embed"], hf["n_head"]
    if d_model % n_heads:
        raise refuse("hidden_size", d_model, f"not a multiple of n_head={n_heads}")
    return TransformerConfig(
        vocab_size=hf["vocab_size"], d_model=d_model, n_layers=hf["n_layer"], n_heads=n_heads, n_kv_heads=n_heads,
        d_ff=4 * d_model, max_seq_len=None, dropout=float(hf.get("hidden_dropout", 0.0)), pos="alibi",
        norm="layernorm", norm_eps=float(hf.get("layer_norm_epsilon", 1e-5)), norm_position="pre", mlp="gelu_tanh",
        qkv_bias=True, bias=True, tie_embeddings=bool(hf.get("tie_word_embeddings", True)), causal=True,
        embed_norm=True, init_std=float(hf.get("initializer_range", 0.02)))


def regroup_qkv(tensor: torch.Tensor, n_heads: int, to_bloom: bool) -> torch.Tensor:
    """`query_key_value` rows (weight or bias) between BLOOM's (head, [q, k, v], head_dim) order and biotf's
    ([q, k, v], head, head_dim)."""
    shape = (3, n_heads, -1) if to_bloom else (n_heads, 3, -1)
    rows = tensor.reshape(*shape, *tensor.shape[1:]).transpose(0, 1)
    return rows.reshape(tensor.shape)


def bloom_to_biotf(weights: Mapping[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
    """Rename BLOOM tensors into a biotf state dict, the fused q/k/v rows regrouped (`regroup_qkv`)."""
    take, prefix = tensor_reader(weights, "BLOOM", BLOOM_PREFIXES, "word_embeddings.weight")
    state = {"embed.weight": take(prefix + "word_embeddings.weight"),
             "embed_norm.weight": take(prefix + "word_embeddings_layernorm.weight"),
             "embed_norm.bias": take(prefix + "word_embeddings_layernorm.bias"),
             "final_norm.weight": take(prefix + "ln_f.weight"), "final_norm.bias": take(prefix + "ln_f.bias")}
    for i in range(config.n_layers):
        for hf_name, ours in BLOOM_LAYER.items():
            for kind in ("weight", "bias"):
                tensor = take(f"{prefix}h.{i}.{hf_name}.{kind}")
                if ours == "attn.qkv":
                    tensor = regroup_qkv(tensor, config.n_heads, to_bloom=False)
                state[f"blocks.{i}.{ours}.{kind}"] = tensor
    if not config.tie_embeddings:
        state["lm_head.weight"] = take(prefix.removesuffix("transformer.") + "lm_head.weight")
    return state


# --- biotf -> BLOOM ----------------------------------------------------------------------------
BLOOM_SHAPE = {"pos": ("alibi",), "norm": ("layernorm",), "norm_position": ("pre",), "mlp": ("gelu_tanh",),
               "qkv_bias": (True,), "bias": (True,), "embed_norm": (True,)}
# Fields BLOOM's config.json writes (or that mean nothing to it: max_seq_len, rope_theta, mask_token_id).
BLOOM_FREE = ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff", "max_seq_len", "dropout",
              "rope_theta", "norm_eps", "tie_embeddings", "mask_token_id", "init_std")


def biotf_to_bloom_config(config: TransformerConfig) -> dict[str, Any]:
    check_holds(config, "BLOOM", BLOOM_SHAPE, BLOOM_FREE)
    for key, value, needed in (("n_kv_heads", config.n_kv_heads, config.n_heads), ("d_ff", config.d_ff,
                                                                                   4 * config.d_model)):
        if value != needed:
            raise CheckpointError(f"cannot write a BLOOM checkpoint: config {key}={value}, BLOOM needs {key}={needed}")
    return {
        "architectures": ["BloomForCausalLM"], "model_type": "bloom", "vocab_size": config.vocab_size,
        "hidden_size": config.d_model, "n_layer": config.n_layers, "n_head": config.n_heads,
        "layer_norm_epsilon": config.norm_eps, "hidden_dropout": config.dropout, "attention_dropout": config.dropout,
        "initializer_range": config.init_std, "apply_residual_connection_post_layernorm": False,
        "pretraining_tp": 1, "slow_but_exact": False, "tie_word_embeddings": config.tie_embeddings, "use_cache": True,
        # BloomConfig's defaults (1, 2) would name tokens of BLOOM's vocabulary, which this one need not be.
        "bos_token_id": None, "eos_token_id": None,
    }


def biotf_to_bloom(state: Mapping[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
    """Rename a biotf state dict into BloomForCausalLM tensors (the inverse of `bloom_to_biotf`)."""
    out = {"transformer.word_embeddings.weight": state["embed.weight"],
           "transformer.word_embeddings_layernorm.weight": state["embed_norm.weight"],
           "transformer.word_embeddings_layernorm.bias": state["embed_norm.bias"],
           "transformer.ln_f.weight": state["final_norm.weight"], "transformer.ln_f.bias": state["final_norm.bias"]}
    for i in range(config.n_layers):
        for hf_name, ours in BLOOM_LAYER.items():
            for kind in ("weight", "bias"):
                tensor = state[f"blocks.{i}.{ours}.{kind}"]
                if ours == "attn.qkv":
                    tensor = regroup_qkv(tensor, config.n_heads, to_bloom=True)
                out[f"transformer.h.{i}.{hf_name}.{kind}"] = tensor
    if not config.tie_embeddings:
        out["lm_head.weight"] = state["lm_head.weight"]
    return out


FAMILY = Family("bloom", architectures=("BloomForCausalLM",), causal=("BloomForCausalLM",), config=bloom_config,
                to_biotf=bloom_to_biotf, export_config=biotf_to_bloom_config, from_biotf=biotf_to_bloom)
