"""ALBERT (`model_type: albert`) -> biotf: `AlbertForMaskedLM` (and `AlbertForPreTraining`'s masked-LM head) and, as
encoders without LM head, `AlbertModel` and the classifiers (their pooler, sentence-order and classifier heads are
not read). Read only.

ALBERT is BERT (learned positions, token type 0, an embedding LayerNorm, Post-LN blocks, the masked-LM head dense ->
activation -> LayerNorm -> tied decoder + bias) with two differences, each a switch of biotf's transformer:
- factorised embeddings (`d_embed` = embedding_size): tokens, positions, token types and the embedding norm are
  embedding_size wide, `embedding_hidden_mapping_in` (`embed_project`) maps them to hidden_size, and the head's dense
  maps hidden_size back to embedding_size before the decoder;
- one layer shared by all `num_hidden_layers` (`share_layers`): `num_hidden_groups` = `inner_group_num` = 1, as every
  published ALBERT; other groupings are refused.
Its `hidden_act` (gelu_new by default) is both the MLP's and the head's activation, as in BERT.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from biotf.errors import CheckpointError
from biotf.model.config import TransformerConfig
from biotf.model.hf.bert import HIDDEN_ACTS
from biotf.model.hf.encoder import Names, linear, read
from biotf.model.hf.family import Family, read_architectures, refuser, trunk_prefix

MASKED_LM = ("AlbertForMaskedLM", "AlbertForPreTraining")
ENCODERS = ("AlbertModel", "AlbertForSequenceClassification", "AlbertForTokenClassification")
LAYER = "encoder.albert_layer_groups.0.albert_layers.0."


def albert_config(hf: Mapping[str, Any]) -> TransformerConfig:
    """A TransformerConfig that computes what this ALBERT config.json describes; what the transformer cannot express
    (several layer groups, relative positions, another activation) is refused naming the field."""
    refuse = refuser("ALBERT")
    for key in ("num_hidden_groups", "inner_group_num"):
        if hf.get(key, 1) != 1:
            raise refuse(key, hf[key], "biotf reads ALBERT's single shared layer (num_hidden_groups = "
                                       "inner_group_num = 1, as every published ALBERT)")
    position_type = hf.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise refuse("position_embedding_type", position_type, "biotf reads absolute (learned) positions")
    activation = hf.get("hidden_act", "gelu_new")
    if activation not in HIDDEN_ACTS:
        raise refuse("hidden_act", activation, f"biotf computes {' | '.join(HIDDEN_ACTS)}")
    architectures = read_architectures(hf, MASKED_LM + ENCODERS, refuse, "biotf reads")
    d_model, n_heads = hf["hidden_size"], hf["num_attention_heads"]
    if d_model % n_heads:
        raise refuse("hidden_size", d_model, f"not a multiple of num_attention_heads={n_heads}")
    lm_head = bool(architectures & set(MASKED_LM))
    mlp = HIDDEN_ACTS[activation]
    return TransformerConfig(
        vocab_size=hf["vocab_size"], d_model=d_model, n_layers=hf["num_hidden_layers"], n_heads=n_heads,
        d_ff=hf["intermediate_size"], max_seq_len=hf["max_position_embeddings"],
        dropout=float(hf.get("hidden_dropout_prob") or 0.0), pos="learned", norm="layernorm",
        norm_eps=float(hf.get("layer_norm_eps") or 1e-12), norm_position="post", mlp=mlp, qkv_bias=True, bias=True,
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)), causal=False, embed_norm=True, lm_head=lm_head,
        lm_head_transform=lm_head, lm_head_bias=lm_head, init_std=float(hf.get("initializer_range", 0.02)),
        type_vocab_size=hf.get("type_vocab_size", 2), lm_head_activation=mlp, d_embed=hf.get("embedding_size", 128),
        share_layers=True)


def tensor_names(config: TransformerConfig, trunk: str, head: str) -> Names:
    """biotf name -> HF name of every tensor, the encoder's under `trunk`, the masked-LM head's under `head`."""
    embeddings, layer = trunk + "embeddings.", trunk + LAYER
    renamed = {"embed.weight": embeddings + "word_embeddings.weight",
               "positions.table.weight": embeddings + "position_embeddings.weight",
               **linear("embed_norm", embeddings + "LayerNorm"),
               **linear("embed_project", trunk + "encoder.embedding_hidden_mapping_in")}
    if config.type_vocab_size:
        renamed["token_type_embed.weight"] = embeddings + "token_type_embeddings.weight"
    for ours, hf in (("attn.out", "attention.dense"), ("attn_norm", "attention.LayerNorm"), ("mlp.up", "ffn"),
                     ("mlp.down", "ffn_output"), ("mlp_norm", "full_layer_layer_norm")):
        renamed.update(linear("blocks.0." + ours, layer + hf))
    fused = {f"blocks.0.attn.qkv.{kind}": tuple(f"{layer}attention.{part}.{kind}" for part in ("query", "key", "value"))
             for kind in ("weight", "bias")}
    if config.lm_head:
        renamed.update({**linear("head_transform.dense", head + "dense"),
                        **linear("head_transform.norm", head + "LayerNorm"), "lm_head_bias": head + "bias"})
        if not config.tie_embeddings:
            renamed["lm_head.weight"] = head + "decoder.weight"
    return Names(renamed, fused)


def albert_to_biotf(weights: Mapping[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
    """Rename and fuse ALBERT tensors into a biotf state dict; a bare AlbertModel's have no `albert.` prefix, a
    torch.compile'd model's an `_orig_mod.` before it."""
    anchor = "embeddings.word_embeddings.weight"
    trunk = trunk_prefix(weights, "ALBERT", "albert.", anchor)
    head = trunk.removesuffix("albert.") + "predictions."
    if config.lm_head and head + "dense.weight" not in weights:
        raise CheckpointError("ALBERT checkpoint has no masked-LM head (predictions.*) although its config.json says "
                              f"{MASKED_LM[0]}; set architectures to {ENCODERS[0]} to load the encoder alone")
    names = tensor_names(config, trunk, head)
    if config.lm_head and not config.tie_embeddings and head + "decoder.bias" in weights:
        names.renamed["lm_head_bias"] = head + "decoder.bias"  # an untied decoder's own bias
    return read(weights, names, "ALBERT")


FAMILY = Family("albert", architectures=MASKED_LM + ENCODERS, causal=(), config=albert_config,
                to_biotf=albert_to_biotf)
