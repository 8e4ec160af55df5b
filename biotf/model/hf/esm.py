"""ESM (`model_type: esm`) <-> biotf: `EsmForMaskedLM` (ESM-2 with rotary positions, ESM-1b with absolute ones),
also the encoder of `EsmModel`, `EsmForSequenceClassification` and `EsmForTokenClassification`, which have no LM
head: the model then has `lm_head=False`, and their pooler / classifier weights are not read. The contact-prediction
regression (`esm.contact_head.regression.*`, or `contact_head.regression.*` without the `esm.` prefix, fair-esm's
names) is read when the checkpoint has it, and turns `contact_head` on (`biotf.model.heads`). Written back as
`EsmForMaskedLM`, or `EsmModel` without LM head. The tensor names are the table of `encoder.py`, shared with BERT."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch

from biotf.errors import CheckpointError
from biotf.model.config import TransformerConfig
from biotf.model.hf.encoder import Names, block_names, linear, read, write
from biotf.model.hf.family import Family, check_holds, read_architectures, refuser, trunk_prefix
from biotf.model.hf.weights import stored_inverse_frequency
from biotf.model.positions import rope_inverse_frequency

ESM_POSITIONS = {"rotary": "rope", "absolute": "learned"}


def esm_prefix(weights: Mapping[str, torch.Tensor]) -> str:
    """What precedes `embeddings.word_embeddings.weight`: "esm." in a model with a head, "" in a bare EsmModel,
    each after the "_orig_mod." of a torch.compile'd model."""
    return trunk_prefix(weights, "ESM", "esm.", "embeddings.word_embeddings.weight")


# The ESM architectures biotf loads; all but EsmForMaskedLM load as an encoder without LM head.
ESM_ARCHITECTURES = ("EsmForMaskedLM", "EsmModel", "EsmForSequenceClassification", "EsmForTokenClassification")


def esm_config(hf: Mapping[str, Any]) -> TransformerConfig:
    """A TransformerConfig that computes what this ESM config.json describes (HF `EsmForMaskedLM`, or the encoder
    without LM head of the other `ESM_ARCHITECTURES`; no `architectures` means EsmForMaskedLM, as hub ESM-2s).

    Absolute positions (ESM-1b) load as a learned table with position_offset = pad id + 1: HF numbers the real
    tokens from padding_idx + 1 (fairseq's `make_positions`), counting the tokens that are not <pad>; biotf counts
    those of the attention mask, the same on every real token when the mask is (ids != pad).
    """

    refuse = refuser("ESM")

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
    offset = hf["pad_token_id"] + 1 if position_type == "absolute" else 0
    if offset:
        max_positions -= offset
    token_dropout = bool(hf.get("token_dropout", False))
    architectures = read_architectures(hf, ESM_ARCHITECTURES, refuse)
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
        lm_head_bias=lm_head, init_std=float(hf.get("initializer_range", 0.02)), position_offset=offset)


def tensor_names(config: TransformerConfig, trunk: str, head: str) -> Names:
    """biotf name -> HF name of every ESM tensor, the encoder's under `trunk`, the LM head's under `head`."""
    # HF applies emb_layer_norm_after after the last layer always: it is biotf's Pre-LN final norm.
    names = block_names(config.n_layers, trunk, "attention.LayerNorm", "LayerNorm")
    names.renamed.update({"embed.weight": trunk + "embeddings.word_embeddings.weight",
                          **linear("final_norm", trunk + "encoder.emb_layer_norm_after")})
    if config.pos == "learned":
        names.renamed["positions.table.weight"] = trunk + "embeddings.position_embeddings.weight"
    if config.embed_norm:
        names.renamed.update(linear("embed_norm", trunk + "embeddings.layer_norm"))
    if config.lm_head:
        names.renamed.update({**linear("head_transform.dense", head + "lm_head.dense"),
                              **linear("head_transform.norm", head + "lm_head.layer_norm"),
                              "lm_head_bias": head + "lm_head.bias"})
        if not config.tie_embeddings:
            names.renamed["lm_head.weight"] = head + "lm_head.decoder.weight"
    if config.contact_head:
        names.renamed.update(linear("contact_head.regression", trunk + "contact_head.regression"))
    return names


def esm_to_biotf(weights: Mapping[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
    """Rename and fuse ESM tensors into a biotf state dict. The `esm.` prefix is absent in a bare `EsmModel`; the
    contact head is read when present (its regression is named as in fair-esm), the pooler and classifier are not."""
    prefix = esm_prefix(weights)
    head_prefix = prefix.removesuffix("esm.")
    if config.lm_head and head_prefix + "lm_head.dense.weight" not in weights:
        raise CheckpointError("ESM checkpoint has no masked-LM head (lm_head.*) although its config.json says "
                              "EsmForMaskedLM; set architectures to EsmModel to load the encoder alone")
    contact_head = prefix + "contact_head.regression.weight" in weights
    state = read(weights, tensor_names(config.replace(contact_head=contact_head), prefix, head_prefix), "ESM")
    rotary = re.escape(prefix) + r"(encoder\.layer\.(\d+|\*)\.attention\.self\.)?rotary_embeddings\.inv_freq"
    return {**state, **stored_inverse_frequency(weights, rotary, config)}


# --- biotf -> ESM -----------------------------------------------------------------------------
# Fields ESM's config.json writes (or that mean nothing to it: rope_theta with absolute positions).
ESM_FREE = ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_seq_len", "dropout", "rope_theta", "norm_eps",
            "tie_embeddings", "token_dropout", "mask_token_id", "embed_norm", "lm_head", "contact_head", "init_std",
            "position_offset")


def biotf_to_esm_config(config: TransformerConfig) -> dict[str, Any]:
    """The config.json of an `EsmForMaskedLM` (`EsmModel` without LM head) that computes what `config` does; what ESM
    cannot hold is refused naming the field. Absolute positions are written with pad_token_id = position_offset - 1,
    the pad id HF numbers real tokens after; rotary ones with ESM-2's pad id, 1 (HF then uses it for nothing)."""
    shape: dict[str, tuple[Any, ...]] = {
        "pos": tuple(ESM_POSITIONS.values()), "norm": ("layernorm",), "norm_position": ("pre",), "mlp": ("gelu",),
        "n_kv_heads": (config.n_heads,), "qkv_bias": (True,), "bias": (True,), "causal": (False,),
        "lm_head_transform": (config.lm_head,),
        "lm_head_bias": (config.lm_head,)}
    check_holds(config, "ESM", shape, ESM_FREE)
    absolute = config.pos == "learned"
    if absolute and config.position_offset < 1:
        raise CheckpointError("cannot write an ESM checkpoint: config position_offset=0, ESM numbers absolute "
                              "positions from pad id + 1, so position_offset must be >= 1")
    return {
        "architectures": ["EsmForMaskedLM" if config.lm_head else "EsmModel"], "model_type": "esm",
        "vocab_size": config.vocab_size, "hidden_size": config.d_model, "num_hidden_layers": config.n_layers,
        "num_attention_heads": config.n_heads, "intermediate_size": config.d_ff, "hidden_act": "gelu",
        "hidden_dropout_prob": config.dropout, "attention_probs_dropout_prob": config.dropout,
        "position_embedding_type": "absolute" if absolute else "rotary", "rope_theta": config.rope_theta,
        "max_position_embeddings": (config.max_seq_len or 1024) + config.position_offset,
        "pad_token_id": config.position_offset - 1 if absolute else 1, "mask_token_id": config.mask_token_id,
        "token_dropout": config.token_dropout, "emb_layer_norm_before": config.embed_norm,
        "layer_norm_eps": config.norm_eps, "initializer_range": config.init_std,
        "tie_word_embeddings": config.tie_embeddings, "is_decoder": False, "torch_dtype": "float32",
        "dtype": "float32"}


def biotf_to_esm(state: Mapping[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
    """ESM tensors of a biotf state dict (the inverse of `esm_to_biotf`); stored rotary frequencies that rope_theta
    does not give are written under the shared name biotf reads back."""
    out = write(state, tensor_names(config, "esm." if config.lm_head else "", ""))
    frequency = state.get("positions.inverse_frequency")
    if frequency is not None and not torch.equal(frequency.cpu(), rope_inverse_frequency(config.head_dim,
                                                                                         config.rope_theta)):
        out["esm.rotary_embeddings.inv_freq" if config.lm_head else "rotary_embeddings.inv_freq"] = frequency
    return out


FAMILY = Family("esm", architectures=ESM_ARCHITECTURES, causal=(), config=esm_config, to_biotf=esm_to_biotf,
                export_config=biotf_to_esm_config, from_biotf=biotf_to_esm)
