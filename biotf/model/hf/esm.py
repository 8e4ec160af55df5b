"""ESM (`model_type: esm`) -> biotf: `EsmForMaskedLM` (ESM-2 with rotary positions, ESM-1b with absolute ones),
also the encoder of `EsmModel`, `EsmForSequenceClassification` and `EsmForTokenClassification`, which have no LM
head: the model then has `lm_head=False`, and their pooler / classifier weights are not read. The contact-prediction
regression (`esm.contact_head.regression.*`, or `contact_head.regression.*` without the `esm.` prefix, fair-esm's
names) is read when the checkpoint has it, and turns `contact_head` on (`biotf.model.contacts`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch

from biotf.errors import CheckpointError
from biotf.model.config import TransformerConfig
from biotf.model.hf.family import Family
from biotf.model.hf.weights import stored_inverse_frequency

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


FAMILY = Family("esm", architectures=ESM_ARCHITECTURES, causal=(), config=esm_config, to_biotf=esm_to_biotf)
