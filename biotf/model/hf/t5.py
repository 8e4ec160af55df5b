"""T5 encoders (`model_type: t5`) -> biotf: `T5EncoderModel`, and the encoder of `T5ForConditionalGeneration` /
`T5WithLMHeadModel` / `T5Model` (ProtT5 publishes both layouts; Ankh the second). Written back as a
`T5EncoderModel`.

What a T5 encoder is in biotf's config: no position added to the embeddings but T5's learned bias of bucketed
relative distances (`pos: t5`, bidirectional, the table transformers keeps in the first layer and shares with the
others), unscaled attention scores (`scale_attention: false`), heads of d_kv dimensions (`d_head`, which need not
divide d_model), Pre-LN RMS norms without bias computed in float32 (T5LayerNorm is biotf's `rmsnorm`), a final norm,
no bias anywhere, and the feed-forward `feed_forward_proj` names: `relu` (ProtT5), `gated-gelu` (T5 v1.1, Ankh:
transformers computes it with `gelu_new`, biotf's `geglu_tanh`), and the other `{act}` / `gated-{act}` biotf has.

The decoder and its LM head are not read, so the model has no LM head (`lm_head: false`): embeddings and hidden
states, no logits or likelihoods. T5 has no position table and ProtT5's authors embed every protein whole, so
`max_seq_len` (the window `biotf embed` reads by default) is `WHOLE_RECORD_TOKENS`, not config.json's `n_positions`
(512 in ProtT5's: the length it was trained at, not a limit); attention over longer records runs in chunks of queries,
so memory grows linearly with length.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from biotf.errors import CheckpointError
from biotf.model.config import TransformerConfig
from biotf.model.hf.encoder import Names, read, write
from biotf.model.hf.family import Family, check_holds, read_architectures, refuser

T5_ARCHITECTURES = ("T5EncoderModel", "T5ForConditionalGeneration", "T5WithLMHeadModel", "T5Model")
# feed_forward_proj -> biotf's mlp ("gated-gelu" is gelu_new's, as transformers' T5Config maps it: T5 has no gated
# exact GELU). The first name of each mlp is the one written.
T5_MLPS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
           "gated-relu": "reglu", "gated-gelu": "geglu_tanh", "gated-gelu_new": "geglu_tanh",
           "gated-gelu_pytorch_tanh": "geglu_tanh", "gated-silu": "swiglu"}
WRITTEN_MLPS = {ours: hf for hf, ours in reversed(T5_MLPS.items())}
WHOLE_RECORD_TOKENS = 65536  # longer than any protein (titin: ~35,000 residues)


def t5_mlp(feed_forward_proj: Any) -> str:
    """biotf's `mlp` for T5's feed_forward_proj ("relu", "gated-gelu", ...), refused naming the field when biotf has
    no such MLP."""
    if feed_forward_proj not in T5_MLPS:
        raise refuser("T5")("feed_forward_proj", feed_forward_proj, f"biotf computes {' | '.join(T5_MLPS)}")
    return T5_MLPS[feed_forward_proj]


def t5_config(hf: Mapping[str, Any]) -> TransformerConfig:
    """A TransformerConfig that computes the encoder this T5 config.json describes; a decoder-only config and an
    architecture other than `T5_ARCHITECTURES` are refused naming the field."""
    refuse = refuser("T5")
    read_architectures(hf, T5_ARCHITECTURES, refuse, "biotf reads the encoder of")
    if hf.get("is_decoder"):
        raise refuse("is_decoder", True, "biotf reads T5's bidirectional encoder")
    return TransformerConfig(
        vocab_size=hf["vocab_size"], d_model=hf["d_model"], n_layers=hf["num_layers"], n_heads=hf["num_heads"],
        n_kv_heads=hf["num_heads"], d_head=hf.get("d_kv", 64), d_ff=hf["d_ff"],
        max_seq_len=WHOLE_RECORD_TOKENS, dropout=float(hf.get("dropout_rate") or 0.0),
        pos="t5", relative_buckets=hf.get("relative_attention_num_buckets", 32),
        relative_max_distance=hf.get("relative_attention_max_distance", 128), scale_attention=False,
        norm="rmsnorm", norm_eps=float(hf.get("layer_norm_epsilon") or 1e-6), norm_position="pre",
        mlp=t5_mlp(hf.get("feed_forward_proj", "relu")), qkv_bias=False, bias=False, tie_embeddings=True,
        causal=False, lm_head=False)


def tensor_names(config: TransformerConfig, prefix: str, embedding: str) -> Names:
    """biotf name -> HF name of every encoder tensor, each under `prefix` (`embedding`: the token embedding's)."""
    encoder = prefix + "encoder."
    names: dict[str, str] = {"embed.weight": embedding, "final_norm.weight": encoder + "final_layer_norm.weight",
                             "positions.relative_bias.weight":
                                 encoder + "block.0.layer.0.SelfAttention.relative_attention_bias.weight"}
    fused: dict[str, tuple[str, ...]] = {}
    for i in range(config.n_layers):
        hf, ours = f"{encoder}block.{i}.layer.", f"blocks.{i}."
        attention, feed_forward = hf + "0.SelfAttention.", hf + "1.DenseReluDense."
        fused[ours + "attn.qkv.weight"] = tuple(attention + f"{part}.weight" for part in "qkv")
        names.update({ours + "attn.out.weight": attention + "o.weight",
                      ours + "attn_norm.weight": hf + "0.layer_norm.weight",
                      ours + "mlp_norm.weight": hf + "1.layer_norm.weight",
                      ours + "mlp.down.weight": feed_forward + "wo.weight"})
        if config.mlp in ("relu", "gelu", "gelu_tanh"):  # two projections
            names[ours + "mlp.up.weight"] = feed_forward + "wi.weight"
        else:  # gated: wi_0 goes through the activation (biotf's gate, first), wi_1 is the linear half
            fused[ours + "mlp.gate_up.weight"] = (feed_forward + "wi_0.weight", feed_forward + "wi_1.weight")
    return Names(names, fused)


def t5_to_biotf(weights: Mapping[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
    """Rename and fuse the encoder's tensors into a biotf state dict (the decoder and LM head are left unread). The
    token embedding is `shared.weight`, or `encoder.embed_tokens.weight` where only that was saved; an
    `_orig_mod.` before every name (a torch.compile'd model) is read through."""
    candidates = [prefix + name for prefix in ("", "_orig_mod.") for name in ("shared.weight",
                                                                               "encoder.embed_tokens.weight")]
    embedding = next((name for name in candidates if name in weights), None)
    if embedding is None:
        raise CheckpointError("not a T5 checkpoint: no shared.weight or encoder.embed_tokens.weight")
    prefix = "_orig_mod." if embedding.startswith("_orig_mod.") else ""
    return read(weights, tensor_names(config, prefix, embedding), "T5")


# --- biotf -> T5EncoderModel ---------------------------------------------------------------------------------------
# Fields a T5 config.json writes (or that mean nothing to it: rope_theta, mask_token_id).
T5_FREE = ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_seq_len", "dropout", "rope_theta", "norm_eps",
           "tie_embeddings", "mask_token_id", "init_std", "d_head", "relative_buckets", "relative_max_distance")


def biotf_to_t5_config(config: TransformerConfig) -> dict[str, Any]:
    """The config.json of a `T5EncoderModel` that computes what `config` does; what T5 cannot hold is refused naming
    the field."""
    shape: dict[str, tuple[Any, ...]] = {
        "pos": ("t5",), "scale_attention": (False,), "norm": ("rmsnorm",), "norm_position": ("pre",),
        "mlp": tuple(WRITTEN_MLPS), "n_kv_heads": (config.n_heads,), "causal": (False,), "lm_head": (False,)}
    check_holds(config, "T5", shape, T5_FREE)
    return {
        "architectures": ["T5EncoderModel"], "model_type": "t5", "vocab_size": config.vocab_size,
        "d_model": config.d_model, "d_kv": config.head_dim, "d_ff": config.d_ff, "num_layers": config.n_layers,
        "num_heads": config.n_heads, "relative_attention_num_buckets": config.relative_buckets,
        "relative_attention_max_distance": config.relative_max_distance, "dropout_rate": config.dropout,
        "layer_norm_epsilon": config.norm_eps, "feed_forward_proj": WRITTEN_MLPS[config.mlp],
        "is_encoder_decoder": False, "is_decoder": False,
        "use_cache": False, "pad_token_id": 0, "eos_token_id": 1, "torch_dtype": "float32", "dtype": "float32"}


def biotf_to_t5(state: Mapping[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
    """T5EncoderModel tensors of a biotf state dict (the inverse of `t5_to_biotf`); the embedding is written once,
    as `shared.weight`, which transformers ties to `encoder.embed_tokens`."""
    return write(state, tensor_names(config, "", "shared.weight"))


FAMILY = Family("t5", architectures=T5_ARCHITECTURES, causal=(), config=t5_config, to_biotf=t5_to_biotf,
                export_config=biotf_to_t5_config, from_biotf=biotf_to_t5)
