"""T5 encoders (`model_type: t5`) -> biotf: `T5EncoderModel`, and the encoder of `T5ForConditionalGeneration` /
`T5WithLMHeadModel` / `T5Model` (ProtT5 publishes both layouts; Ankh the second). Read only.

What a T5 encoder is in biotf's config: no position added to the embeddings but T5's learned bias of bucketed
relative distances (`pos: t5`, bidirectional, the table transformers keeps in the first layer and shares with the
others), unscaled attention scores (`scale_attention: false`), heads of d_kv dimensions (`d_head`, which need not
divide d_model), Pre-LN RMS norms without bias computed in float32 (T5LayerNorm is biotf's `rmsnorm`), a final norm,
no bias anywhere, and the feed-forward `feed_forward_proj` names: `relu` (ProtT5), `gated-gelu` (T5 v1.1, Ankh:
transformers computes it with `gelu_new`, biotf's `geglu_tanh`), and the other `{act}` / `gated-{act}` biotf has.

The decoder and its LM head are not read, so the model has no LM head (`lm_head: false`): embeddings and hidden
states, no logits or likelihoods. `max_seq_len` is config.json's `n_positions` (512 when absent), informative only:
the relative bias reads any length, past it with a warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from biotf.errors import CheckpointError
from biotf.model.config import TransformerConfig
from biotf.model.hf.encoder import Names, read
from biotf.model.hf.family import Family, refuser

T5_ARCHITECTURES = ("T5EncoderModel", "T5ForConditionalGeneration", "T5WithLMHeadModel", "T5Model")
# feed_forward_proj's activation (as transformers maps it: "gated-gelu" computes gelu_new) -> biotf's mlp, plain and
# gated.
T5_ACTIVATIONS = {"relu": ("relu", "reglu"), "gelu": ("gelu", "geglu"), "gelu_new": ("gelu_tanh", "geglu_tanh"),
                  "gelu_pytorch_tanh": ("gelu_tanh", "geglu_tanh"), "silu": (None, "swiglu")}
DEFAULT_MAX_SEQ_LEN = 512


def t5_mlp(feed_forward_proj: Any) -> str:
    """biotf's `mlp` for T5's feed_forward_proj ("relu", "gated-gelu", ...), refused naming the field when biotf has
    no such MLP."""
    refuse = refuser("T5")
    if not isinstance(feed_forward_proj, str):
        raise refuse("feed_forward_proj", feed_forward_proj, "expected a string such as relu or gated-gelu")
    gated = feed_forward_proj.startswith("gated-")
    activation = feed_forward_proj.removeprefix("gated-")
    if gated and activation == "gelu":
        activation = "gelu_new"  # transformers' T5Config maps gated-gelu to gelu_new
    mlp = T5_ACTIVATIONS.get(activation, (None, None))[gated]
    if mlp is None:
        known = [name for name, (plain, _) in T5_ACTIVATIONS.items() if plain and name != "gelu_new"]
        known += [f"gated-{name}" for name in T5_ACTIVATIONS if name not in ("gelu_new", "gelu_pytorch_tanh")]
        raise refuse("feed_forward_proj", feed_forward_proj, f"biotf computes {' | '.join(known)}")
    return mlp


def t5_config(hf: Mapping[str, Any]) -> TransformerConfig:
    """A TransformerConfig that computes the encoder this T5 config.json describes; a decoder-only config and an
    architecture other than `T5_ARCHITECTURES` are refused naming the field."""
    refuse = refuser("T5")
    architectures = hf.get("architectures") or ["T5EncoderModel"]
    if not set(architectures) & set(T5_ARCHITECTURES):
        raise refuse("architectures", architectures, f"biotf reads the encoder of {' | '.join(T5_ARCHITECTURES)}")
    if hf.get("is_decoder"):
        raise refuse("is_decoder", True, "biotf reads T5's bidirectional encoder")
    return TransformerConfig(
        vocab_size=hf["vocab_size"], d_model=hf["d_model"], n_layers=hf["num_layers"], n_heads=hf["num_heads"],
        n_kv_heads=hf["num_heads"], d_head=hf.get("d_kv", 64), d_ff=hf["d_ff"],
        max_seq_len=hf.get("n_positions") or DEFAULT_MAX_SEQ_LEN, dropout=float(hf.get("dropout_rate") or 0.0),
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
        if config.mlp in ("relu", "gelu", "gelu_tanh"):
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


FAMILY = Family("t5", architectures=T5_ARCHITECTURES, causal=(), config=t5_config, to_biotf=t5_to_biotf)
