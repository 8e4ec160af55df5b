"""BERT (`model_type: bert`) and RoBERTa (`roberta`) <-> biotf: one mapping with a `Layout` parameter.

RoBERTa is BERT with three differences, each a field of `Layout`: its tensors sit under `roberta.` and its masked-LM
head under `lm_head.` (BERT: `bert.`, `cls.predictions.`); it numbers real tokens' positions from pad id + 1
(`RobertaEmbeddings.create_position_ids_from_input_ids`, fairseq's `make_positions`), which biotf reads as
`position_offset = pad_token_id + 1`; its head's activation is GELU whatever `hidden_act` says (BERT's is hidden_act).

What a BERT is in biotf's config: learned positions, token-type embeddings (`type_vocab_size`; every token gets type
0, as HF without token_type_ids), a LayerNorm on the embeddings (`embed_norm`), Post-LN blocks (`norm_position:
post`: LayerNorm(x + branch(x)), HF's BertSelfOutput / BertOutput), a GELU (or ReLU) MLP, and on the masked-LM
architectures the head dense -> activation -> LayerNorm -> decoder tied to the embedding, plus a bias.

Positions: HF BERT numbers every position 0, 1, ... whatever the padding, HF RoBERTa counts the tokens that are not
<pad>; biotf counts the tokens of the attention mask. The three agree on every real token of right-padded batches
(how biotf and HF tokenizers pad). With left padding BERT's real tokens are numbered after the pads in HF and from 0
in biotf; a <pad> id inside a sequence with attention mask 1 is counted by biotf and not by HF RoBERTa.

Read: the masked-LM architectures (`BertForMaskedLM`, `BertForPreTraining`'s MLM head, `RobertaForMaskedLM`) and,
as encoders without LM head (`lm_head: false`), the model and classifier architectures, whose pooler and classifier
are not read. Written: `BertForMaskedLM` / `RobertaForMaskedLM`, or `BertModel` / `RobertaModel` without LM head.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import torch

from biotf.errors import CheckpointError
from biotf.model.config import TransformerConfig
from biotf.model.hf.encoder import Names, block_names, linear, read, write
from biotf.model.hf.family import Family, check_holds, read_architectures, refuser, trunk_prefix

# HF hidden_act -> biotf's mlp (and BERT's lm_head_activation); the first name of each is the one written.
HIDDEN_ACTS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu"}
WRITTEN_ACTS = {ours: hf for hf, ours in reversed(HIDDEN_ACTS.items())}


class Layout(NamedTuple):
    """What tells RoBERTa from BERT (see the module docstring)."""

    name: str  # in messages
    model_type: str
    trunk: str  # the prefix of the encoder's tensors in a model with a head
    head: str  # the prefix of the masked-LM head's tensors
    head_dense: str
    head_norm: str
    masked_lm: tuple[str, ...]  # architectures with the masked-LM head (the first is written)
    encoders: tuple[str, ...]  # architectures read as the encoder alone (the first is written)
    positions_from_pad: bool
    head_activation: str | None  # fixed, or None: hidden_act's


BERT = Layout("BERT", "bert", "bert.", "cls.predictions.", "transform.dense", "transform.LayerNorm",
              masked_lm=("BertForMaskedLM", "BertForPreTraining"),
              encoders=("BertModel", "BertForSequenceClassification", "BertForTokenClassification"),
              positions_from_pad=False, head_activation=None)
ROBERTA = Layout("RoBERTa", "roberta", "roberta.", "lm_head.", "dense", "layer_norm",
                 masked_lm=("RobertaForMaskedLM",),
                 encoders=("RobertaModel", "RobertaForSequenceClassification", "RobertaForTokenClassification"),
                 positions_from_pad=True, head_activation="gelu")


def bert_config(layout: Layout, hf: Mapping[str, Any]) -> TransformerConfig:
    """A TransformerConfig that computes what this BERT / RoBERTa config.json describes; what the transformer cannot
    express (relative positions, a decoder, another activation) is refused naming the field."""

    refuse = refuser(layout.name)

    position_type = hf.get("position_embedding_type", "absolute")
    if position_type != "absolute":
        raise refuse("position_embedding_type", position_type, "biotf loads absolute (learned) positions; relative "
                     "ones bias attention scores by distance, which its transformer does not express")
    for key in ("is_decoder", "add_cross_attention"):
        if hf.get(key):
            raise refuse(key, True, f"biotf loads {layout.name} as the bidirectional encoder it was trained as")
    activation = hf.get("hidden_act", "gelu")
    if activation not in HIDDEN_ACTS:
        raise refuse("hidden_act", activation, f"biotf computes {' | '.join(HIDDEN_ACTS)}")
    d_model, n_heads = hf["hidden_size"], hf["num_attention_heads"]
    if d_model % n_heads:
        raise refuse("hidden_size", d_model, f"not a multiple of num_attention_heads={n_heads}")
    architectures = read_architectures(hf, layout.masked_lm + layout.encoders, refuse)
    lm_head = bool(architectures & set(layout.masked_lm))
    offset = 0
    if layout.positions_from_pad:
        if not isinstance(hf.get("pad_token_id"), int):
            raise refuse("pad_token_id", hf.get("pad_token_id"), f"{layout.name} numbers positions from the pad id "
                         "+ 1, so config.json must name it")
        offset = hf["pad_token_id"] + 1
    mlp = HIDDEN_ACTS[activation]
    return TransformerConfig(
        vocab_size=hf["vocab_size"], d_model=d_model, n_layers=hf["num_hidden_layers"], n_heads=n_heads,
        n_kv_heads=n_heads, d_ff=hf["intermediate_size"], max_seq_len=hf["max_position_embeddings"] - offset,
        dropout=float(hf.get("hidden_dropout_prob") or 0.0), pos="learned", norm="layernorm",
        norm_eps=float(hf.get("layer_norm_eps") or 1e-12), norm_position="post", mlp=mlp, qkv_bias=True, bias=True,
        tie_embeddings=bool(hf.get("tie_word_embeddings", True)), causal=False, embed_norm=True, lm_head=lm_head,
        lm_head_transform=lm_head, lm_head_bias=lm_head, init_std=float(hf.get("initializer_range", 0.02)),
        type_vocab_size=hf.get("type_vocab_size", 2), position_offset=offset,
        lm_head_activation=layout.head_activation or mlp)


def tensor_names(layout: Layout, config: TransformerConfig, trunk: str, head: str) -> Names:
    """biotf name -> HF name of every tensor, the encoder's under `trunk`, the head's under `head`."""
    embeddings = trunk + "embeddings."
    names = block_names(config.n_layers, trunk, "attention.output.LayerNorm", "output.LayerNorm")
    names.renamed.update({"embed.weight": embeddings + "word_embeddings.weight",
                          "positions.table.weight": embeddings + "position_embeddings.weight",
                          **linear("embed_norm", embeddings + "LayerNorm")})
    if config.type_vocab_size:
        names.renamed["token_type_embed.weight"] = embeddings + "token_type_embeddings.weight"
    if config.lm_head:
        names.renamed.update({**linear("head_transform.dense", head + layout.head_dense),
                              **linear("head_transform.norm", head + layout.head_norm)})
        if config.lm_head_bias:
            names.renamed["lm_head_bias"] = head + "bias"
        if not config.tie_embeddings:
            names.renamed["lm_head.weight"] = head + "decoder.weight"
    return names


def bert_to_biotf(layout: Layout, weights: Mapping[str, torch.Tensor],
                  config: TransformerConfig) -> dict[str, torch.Tensor]:
    """Rename and fuse BERT / RoBERTa tensors into a biotf state dict; a bare model's have no `bert.` / `roberta.`
    prefix, a torch.compile'd one's an `_orig_mod.` before it."""
    anchor = "embeddings.word_embeddings.weight"
    trunk = trunk_prefix(weights, layout.name, layout.trunk, anchor)
    head = trunk.removesuffix(layout.trunk) + layout.head
    if config.lm_head and head + layout.head_dense + ".weight" not in weights:
        raise CheckpointError(f"{layout.name} checkpoint has no masked-LM head ({head}*) although its config.json "
                              f"says {layout.masked_lm[0]}; set architectures to {layout.encoders[0]} to load the "
                              "encoder alone")
    names = tensor_names(layout, config, trunk, head)
    if config.lm_head and not config.tie_embeddings and head + "decoder.bias" in weights:
        # An untied decoder adds its own bias (transformers ties decoder.bias to `bias` only with the weights).
        names.renamed["lm_head_bias"] = head + "decoder.bias"
    return read(weights, names, layout.name)


# Fields a BERT / RoBERTa config.json writes (or that mean nothing to it: rope_theta, mask_token_id).
BERT_FREE = ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "max_seq_len", "dropout", "rope_theta", "norm_eps",
             "tie_embeddings", "mask_token_id", "init_std", "type_vocab_size", "lm_head", "lm_head_bias")


def check_layout_holds(layout: Layout, config: TransformerConfig) -> None:
    """Refuse, naming the field, a biotf config that this layout cannot hold (`family.check_holds`)."""
    head_activation = layout.head_activation or config.mlp
    shape: dict[str, tuple[Any, ...]] = {
        "pos": ("learned",), "norm": ("layernorm",), "norm_position": ("post",), "mlp": tuple(WRITTEN_ACTS),
        "n_kv_heads": (config.n_heads,), "qkv_bias": (True,), "bias": (True,), "causal": (False,),
        "embed_norm": (True,),
        "lm_head_transform": (config.lm_head,),
        "lm_head_activation": (head_activation if config.lm_head else config.lm_head_activation,)}
    if layout.positions_from_pad and config.position_offset < 1:
        raise CheckpointError(f"cannot write a {layout.name} checkpoint: config position_offset=0, {layout.name} "
                              "numbers positions from pad id + 1, so position_offset must be >= 1")
    free = (*BERT_FREE, "position_offset") if layout.positions_from_pad else BERT_FREE
    check_holds(config, layout.name, shape, free)


def biotf_to_bert_config(layout: Layout, config: TransformerConfig) -> dict[str, Any]:
    check_layout_holds(layout, config)
    hf = {
        "architectures": [layout.masked_lm[0] if config.lm_head else layout.encoders[0]],
        "model_type": layout.model_type, "vocab_size": config.vocab_size, "hidden_size": config.d_model,
        "num_hidden_layers": config.n_layers, "num_attention_heads": config.n_heads,
        "intermediate_size": config.d_ff, "hidden_act": WRITTEN_ACTS[config.mlp],
        "hidden_dropout_prob": config.dropout, "attention_probs_dropout_prob": config.dropout,
        "max_position_embeddings": config.max_seq_len + config.position_offset,
        "type_vocab_size": max(config.type_vocab_size, 1), "initializer_range": config.init_std,
        "layer_norm_eps": config.norm_eps, "position_embedding_type": "absolute",
        "tie_word_embeddings": config.tie_embeddings, "is_decoder": False, "torch_dtype": "float32",
        "dtype": "float32"}
    if layout.positions_from_pad:
        hf["pad_token_id"] = config.position_offset - 1
    return hf


def biotf_to_bert(layout: Layout, state: Mapping[str, torch.Tensor],
                  config: TransformerConfig) -> dict[str, torch.Tensor]:
    """HF tensors of a biotf state dict (the inverse of `bert_to_biotf`): what HF needs and biotf lacks is written as
    the zeros that compute the same (a one-row token-type table, a logit bias)."""
    trunk = layout.trunk if config.lm_head else ""
    out = write(state, tensor_names(layout, config, trunk, layout.head))
    embed = state["embed.weight"]
    if not config.type_vocab_size:
        out[trunk + "embeddings.token_type_embeddings.weight"] = embed.new_zeros(1, config.d_model)
    if config.lm_head:
        bias = out.setdefault(layout.head + "bias", embed.new_zeros(config.vocab_size))
        if not config.tie_embeddings:
            out[layout.head + "decoder.bias"] = bias.clone()  # its own tensor, as transformers saves it
    return out


def family(layout: Layout) -> Family:
    return Family(layout.model_type, architectures=layout.masked_lm + layout.encoders, causal=(),
                  config=lambda hf: bert_config(layout, hf),
                  to_biotf=lambda weights, config: bert_to_biotf(layout, weights, config),
                  export_config=lambda config: biotf_to_bert_config(layout, config),
                  from_biotf=lambda state, config: biotf_to_bert(layout, state, config))


BERT_FAMILY, ROBERTA_FAMILY = family(BERT), family(ROBERTA)
