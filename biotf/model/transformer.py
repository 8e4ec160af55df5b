"""`Transformer`: the one model class of biotf; every architecture is a `TransformerConfig`.

    token embedding (ESM token dropout if token_dropout; x sqrt(d_model) if scale_embeddings; + token type 0's
      vector if type_vocab_size)
      -> conv stem (if stem=conv: tokens -> bins, `stem.py`; everything below until the LM head runs over bins)
      -> positions (learned / sinusoidal added here; rope rotates q, k; alibi biases scores; none)
      -> embedding norm (if embed_norm) -> dropout -> projection to d_model (if d_embed: ALBERT's factorised
         embedding) -> n_layers x Block (attention + MLP, norms per norm_position; attention causal, or
         bidirectional, and limited to the last sliding_window positions if set; one block for all if share_layers)
      -> final norm (Pre-LN only; ESM's emb_layer_norm_after)
      -> upsampling to one vector per token (if stem=conv; `token_states`)
      -> LM head (`heads.py`: [dense -> lm_head_activation -> norm if lm_head_transform] -> tied or own matrix
         [+ lm_head_bias])
    contact head (if contact_head): a regression over every layer's attention maps, applied by
      `predict_contacts` (`heads.py`), not by forward

Conventions (those of Hugging Face, so that losses and hidden states compare one to one):
- `labels` have the shape of `input_ids` and -100 marks positions without a target. A causal model
  shifts internally: logits at t are scored against labels[t + 1] (pass labels = input_ids, with pads
  set to -100). A bidirectional (masked-LM) model scores logits at t against labels[t]. The loss is the
  mean cross-entropy over positions with a target (0 when there are none); training computes the same
  value with the head and loss fused (`loss.language_model_loss(fused=True)`).
- `attention_mask` is 1 for real tokens and 0 for padding, of shape (batch, past + new tokens).
  Position ids count real tokens only (cumulative sum of the mask), so left padding does not move
  absolute positions; padded positions' outputs are unspecified but finite.
- Packed rows (several records in one row) pass `segment_ids` instead of `attention_mask`: (batch, length)
  integers, 0 for padding, each record's tokens one run of its own id (`check_segments`). A record then sees its
  own tokens only (block-diagonal attention, causal within it for a causal model), its positions restart at 0 for
  every position kind, ESM token dropout counts its own mask ratio, and a causal model's last token of a record has
  no target (the next record's first token is not its continuation): each record's logits, hidden states and
  loss terms are those of the record run alone. Per-token ids rather than cumulative lengths: they have the
  shape of the tokens, so collation, chunked attention (`AttentionMask.segments`) and the loss's shift index them
  directly. Where it is estimated cheaper than the block-diagonal mask, the records are attended apart, gathered
  into batches of similar length (`attention_mask.SegmentBatches`; same results). Without them nothing of this runs.
- `hidden_states` (with `output_hidden_states=True`) holds n_layers + 1 tensors: the input of the first
  block, then each block's output, the last one after the final norm and before any head transform (as HF).
- `attentions` (with `output_attentions=True`) holds n_layers float32 tensors (batch, n_heads, T, keys): each
  layer's attention probabilities, masks and padding applied (a padded key gets 0), computed by an explicit softmax
  instead of SDPA for that forward only (as HF's eager attention); `attention_maps` yields them one layer at a time.
  Rows of padded queries are unspecified but finite, as their outputs are.
- With a stem (`stem=conv`), `encode` returns bins: `last_hidden_state`, `hidden_states` and `attentions` have
  ceil(L / stem_factor) positions, `TrunkOutput.bins` says how tokens became bins (its `mask` is the bins' attention
  mask: a bin is real if any of its tokens is) and maps bin values back to tokens (`bins.to_tokens`: each token its
  bin's). Logits, losses and `token_states` are per token, as without a stem: labels keep the shape of input_ids.
- A `KVCache` (`use_cache=True`, or pass one as `past_key_values`) serves incremental decoding of causal
  models; it is updated in place and returned as `past_key_values`. It keeps every position, also with a sliding
  window: the mask hides those outside the window, so decoding equals a full forward exactly.

Plain PyTorch throughout (`nn.Linear`, SDPA). Three choices for speed, invisible in the weights' meaning:
q/k/v are one fused projection and the SwiGLU gate/up another (`biotf.model.hf` maps them explicitly), the mask is
built once per forward for every layer, and the unpadded causal case lets SDPA apply causality itself. Long inputs:
a mask larger than `attention_element_budget` is never built; attention runs in chunks of queries instead
(`attention_mask.py`), so memory grows linearly with length; ALiBi alone (no padding) in float32 on the CPU is never
built past 1,024 tokens at 4 heads (`alibi_blocks.py`: the flash kernel on blocks of keys).
Decoding's own optimisations (weight layout, last-position prefill) live in `biotf.inference.fast`.

A forward pass in reading order (all in `biotf/model/`): this file; `config.py` (every switch it reads);
`block.py` (one layer) with `attention.py`, `kv_cache.py`, `mlp.py` and `norms.py`; `positions.py`;
`attention_mask.py` with `segments.py` (packed rows); `stem.py`; `heads.py` (the LM head's transform, the contact
head, the task heads of fine-tuning); `loss.py` (the loss, plain or fused with the head).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from os import PathLike
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from biotf.errors import ConfigError, InputError
from biotf.model import alibi_blocks
from biotf.model.attention import Attention
from biotf.model.attention_mask import CALL_COST, AttentionMask, SegmentBatches
from biotf.model.block import Block
from biotf.model.kv_cache import KVCache
from biotf.model.config import TransformerConfig
from biotf.model.heads import ContactHead, HeadTransform, predict_contacts
from biotf.model.loss import check_labels, cross_entropy, lm_targets
from biotf.model.norms import build_norm
from biotf.model.positions import AlibiPositions, build_positions, embedding_table, rotary_for_blocks
from biotf.model.segments import check_segments, segment_positions
from biotf.model.stem import BinLayout, Stem

# The share of tokens ESM's training replaced by <mask> (15% selected x 80% masked), hard-coded in every ESM
# training run and in HF EsmEmbeddings; token dropout rescales by it.
ESM_TRAINING_MASK_RATIO = 0.15 * 0.8


@dataclass
class TransformerOutput:
    """`scored` and `correct` come with labels: the positions with a target (the loss's denominator) and how
    many of them have their target as the largest logit (ties count), the numerator of accuracy."""

    logits: torch.Tensor | None
    loss: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None
    past_key_values: KVCache | None = None
    scored: torch.Tensor | None = None
    correct: torch.Tensor | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


class BlockInputs(NamedTuple):
    """What every block takes, prepared once per forward by `Transformer.block_inputs`: the embedded tokens (bins
    with a stem), the rotary tables (`rotary_for_blocks`) or None, the attention mask (or None with `is_causal`, or
    the description of a mask too large to build), the KV cache or None, and with a stem how the tokens became
    bins."""

    hidden: torch.Tensor
    rotary: tuple[torch.Tensor, ...] | None
    mask: torch.Tensor | AttentionMask | None
    is_causal: bool
    cache: KVCache | None
    bins: BinLayout | None = None


@dataclass
class TrunkOutput:
    """What `Transformer.encode` returns: the final hidden states (bins with a stem: `bins` says how tokens became
    them), and optionally every layer's output and attention probabilities."""

    last_hidden_state: torch.Tensor
    hidden_states: tuple[torch.Tensor, ...] | None = None
    past_key_values: KVCache | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    bins: BinLayout | None = None

    def per_token(self, states: torch.Tensor | None = None) -> torch.Tensor:
        """`states` (default last_hidden_state; or any of hidden_states) as one vector per input token: themselves
        without a stem, each token its bin's vector with one (what embeddings and pooled task heads read)."""
        states = self.last_hidden_state if states is None else states
        return states if self.bins is None else self.bins.to_tokens(states)


class Transformer(nn.Module):
    # Recompute each block's activations in backward instead of keeping them (torch.utils.checkpoint, non-reentrant,
    # RNG state restored so dropout repeats): memory for one block's activations instead of n_layers', for about
    # one extra forward. A training choice, not an architecture: set by `trainer.gradient_checkpointing`.
    gradient_checkpointing = False
    # The most elements one attention call may materialise: its mask ((batch or 1) x (heads or 1) x queries x keys),
    # or its scores where SDPA computes them all (attention dropout: PyTorch's CPU kernels have none, so it runs its
    # math kernel). 2^26 is 256 MiB of float32. A mask under the budget is built once per forward and shared by every
    # layer; above it attention runs in chunks of queries sized to fit it (`attention_mask.AttentionMask`), so memory
    # grows linearly with length. Not an architecture: the outputs are the same either way (up to float rounding).
    attention_element_budget = 2 ** 26
    # Packed rows: what one more SDPA call costs, in score multiply-adds, when deciding whether their records are
    # attended apart or through the block-diagonal mask (`attention_mask.SegmentBatches`); None: always the mask.
    # Results are the same either way.
    segment_call_cost: int | None = CALL_COST
    # The LM head's (weight, bias) in float32, set by `biotf.model.precision` on a network converted to bf16 (a plain
    # attribute, not saved): its logits are then computed in float32, since bf16 logits alone drift a pseudo-log-
    # likelihood by ~0.2 nats over 300 residues where the rest of a bf16 network drifts it by ~0.01.
    float_head: tuple[torch.Tensor, torch.Tensor | None] | None = None

    def __init__(self, config: TransformerConfig):
        super().__init__()
        if not isinstance(config, TransformerConfig):
            raise TypeError(f"Transformer needs a TransformerConfig, got {type(config).__name__}")
        self.config = config
        self.embed = embedding_table(config.vocab_size, config.embed_width)
        self.stem = Stem(config) if config.stem == "conv" else None
        self.positions = build_positions(config)
        # Optional stages are None when absent (not Identity): decoding one token runs this forward hundreds of
        # times, and each skipped module call saves a few microseconds of Python.
        self.token_type_embed = (embedding_table(config.type_vocab_size, config.embed_width) if config.type_vocab_size
                                 else None)
        self.embed_norm = build_norm(config, config.embed_width) if config.embed_norm else None
        self.dropout = nn.Dropout(config.dropout) if config.dropout > 0 else None
        self.embed_project = (nn.Linear(config.d_embed, config.d_model, bias=config.bias) if config.d_embed is not None
                              else None)
        self.blocks = nn.ModuleList(Block(config) for _ in range(1 if config.share_layers else config.n_layers))
        # The block each layer runs: its own, or with share_layers the one block every time.
        self.layer_blocks = tuple(self.blocks) * config.n_layers if config.share_layers else tuple(self.blocks)
        # How many keys a query may see: the sliding window, or unbounded (one integer comparison per forward).
        self.window_span = config.sliding_window or sys.maxsize
        self.final_norm = build_norm(config, bias=config.final_norm_has_bias) if config.norm_position == "pre" else None
        self.head_transform = HeadTransform(config) if config.lm_head_transform else None
        own_head = config.lm_head and not config.tie_embeddings
        self.lm_head = nn.Linear(config.embed_width, config.vocab_size, bias=False) if own_head else None
        self.lm_head_bias = nn.Parameter(torch.zeros(config.vocab_size)) if config.lm_head_bias else None
        self.contact_head = ContactHead(config) if config.contact_head else None
        self.reset_parameters()

    # --- initialisation ------------------------------------------------------------------------
    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Normal(0, init_std) weights, zero biases, unit norm gains; the projections that write into the
        residual stream (attention output, MLP down) get init_std / sqrt(2 n_layers) (GPT-2, section 2.3). A model on
        the meta device (a skeleton for a checkpoint's weights) has nothing to initialise: normal_ there imports
        torch._dynamo."""
        if self.embed.weight.is_meta:
            return
        std = self.config.init_std
        for name, module in self.named_modules():
            if isinstance(module, (nn.Linear, nn.Conv1d)):
                scale = 1 / math.sqrt(2 * self.config.n_layers) if name.endswith((".out", ".down")) else 1.0
                nn.init.normal_(module.weight, 0.0, std * scale)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, nn.Embedding):
                nn.init.normal_(module.weight, 0.0, std)
            elif hasattr(module, "weight") and isinstance(getattr(module, "weight"), nn.Parameter):  # norms
                nn.init.ones_(module.weight)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
        if self.lm_head_bias is not None:
            nn.init.zeros_(self.lm_head_bias)

    # --- sizes ---------------------------------------------------------------------------------
    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Parameters counted once each (a tied LM head is the embedding). `exclude_embeddings` leaves out
        the token embedding and a learned position table (as HF's `num_parameters` does)."""
        excluded = set()
        if exclude_embeddings:
            excluded = {id(m.weight) for m in self.modules() if isinstance(m, nn.Embedding)}
        return sum(p.numel() for p in self.parameters() if id(p) not in excluded)

    @property
    def device(self) -> torch.device:
        return self.embed.weight.device

    # --- forward -------------------------------------------------------------------------------
    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                labels: torch.Tensor | None = None, output_hidden_states: bool = False,
                past_key_values: KVCache | None = None, use_cache: bool = False,
                output_attentions: bool = False, segment_ids: torch.Tensor | None = None) -> TransformerOutput:
        """Logits of every position, and with `labels` their loss and counts (see the module docstring)."""
        if labels is not None:
            check_labels(labels, input_ids.shape)
        trunk = self.encode(input_ids, attention_mask, output_hidden_states, past_key_values, use_cache,
                            output_attentions, segment_ids)
        logits = self.logits(self.token_states(trunk))
        if labels is None:
            return TransformerOutput(logits, None, trunk.hidden_states, trunk.past_key_values,
                                     attentions=trunk.attentions)
        loss = cross_entropy(logits, lm_targets(labels, self.config.causal, segment_ids))
        return TransformerOutput(logits, loss.loss, trunk.hidden_states, trunk.past_key_values, loss.scored,
                                 loss.correct, trunk.attentions)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
               output_hidden_states: bool = False, past_key_values: KVCache | None = None,
               use_cache: bool = False, output_attentions: bool = False,
               segment_ids: torch.Tensor | None = None, rows: torch.Tensor | None = None) -> TrunkOutput:
        """Everything but the LM head: the final hidden states (after the final norm), and every layer's output and
        attention probabilities on request (attentions are kept, so no block is recomputed in backward then).
        Embedding export calls this directly, so it never computes (batch x length x vocab) logits it would discard.
        With `rows` (flat indices into batch x length; see `states_at`), the final states of those positions only."""
        if rows is not None and (self.stem is not None or output_hidden_states or output_attentions or use_cache):
            raise ValueError("encode(rows=...) reads final states of tokens: not with a stem, hidden states, "
                             "attentions or a cache")
        inputs = self.block_inputs(input_ids, attention_mask, past_key_values, use_cache, segment_ids)
        x = inputs.hidden
        hidden_states = [x] if output_hidden_states else None
        attentions: list[torch.Tensor] | None = [] if output_attentions else None
        recompute = (self.gradient_checkpointing and self.training and torch.is_grad_enabled() and inputs.cache is None
                     and attentions is None)
        for layer, block in enumerate(self.layer_blocks):
            only = rows if layer == len(self.layer_blocks) - 1 else None
            if recompute:
                x = checkpoint(block, x, inputs.rotary, inputs.mask, inputs.is_causal, None, layer, None, only,
                               use_reentrant=False)
            else:
                x = block(x, inputs.rotary, inputs.mask, inputs.is_causal, inputs.cache, layer, attentions, only)
            if hidden_states is not None:
                hidden_states.append(x)
        if self.final_norm is not None:
            x = self.final_norm(x)
        if hidden_states is not None:
            hidden_states[-1] = x
        return TrunkOutput(x, tuple(hidden_states) if hidden_states is not None else None,
                           inputs.cache if use_cache else None, tuple(attentions) if attentions is not None else None,
                           inputs.bins)

    def token_states(self, trunk: TrunkOutput) -> torch.Tensor:
        """One vector per input token from `encode`'s output: what the LM head reads (logits, losses, scores) and a
        base-resolution task head. Without a stem, last_hidden_state; with one, the bins upsampled (`Stem.upsample`)."""
        if trunk.bins is None:
            return trunk.last_hidden_state
        return self.stem.upsample(trunk.last_hidden_state, trunk.bins)

    def states_at(self, input_ids: torch.Tensor, rows: torch.Tensor, attention_mask: torch.Tensor | None = None,
                  segment_ids: torch.Tensor | None = None) -> torch.Tensor:
        """`token_states` of the positions `rows` only (flat indices, row * length + position), (len(rows),
        d_model): what a caller reading a few positions of each row needs (scoring reads one of a masked copy's L).
        The last block's output projection and MLP, and the final norm, run on those positions alone: they work
        position by position. With a stem (bins, not tokens, go through the blocks) every position is computed."""
        if self.stem is not None:
            states = self.token_states(self.encode(input_ids, attention_mask, segment_ids=segment_ids))
            return states.flatten(0, 1).index_select(0, rows)
        return self.encode(input_ids, attention_mask, segment_ids=segment_ids, rows=rows).last_hidden_state

    def predict_contacts(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                         residue_mask: torch.Tensor | None = None) -> list[torch.Tensor]:
        """Each sequence's (L, L) contact probabilities from the contact head (`heads.predict_contacts`; HF's
        `EsmForMaskedLM.predict_contacts`)."""
        return predict_contacts(self, input_ids, attention_mask, residue_mask)

    def attention_maps(self, input_ids: torch.Tensor,
                       attention_mask: torch.Tensor | None = None) -> Iterator[torch.Tensor]:
        """Each layer's attention probabilities, as `encode(..., output_attentions=True)` gives them, yielded as the
        blocks compute them: a caller that reduces one layer's maps before asking for the next holds one layer's
        (batch x heads x T x T), never n_layers' (what contact prediction on long proteins needs)."""
        inputs = self.block_inputs(input_ids, attention_mask)
        x = inputs.hidden
        for layer, block in enumerate(self.layer_blocks):
            attentions: list[torch.Tensor] = []
            x = block.attend(x, inputs.rotary, inputs.mask, inputs.is_causal, None, layer, attentions)
            yield attentions.pop()
            if layer + 1 < len(self.layer_blocks):
                x = block.feed_forward(x)

    def block_inputs(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                     past_key_values: KVCache | None = None, use_cache: bool = False,
                     segment_ids: torch.Tensor | None = None) -> BlockInputs:
        """The checked inputs embedded (token dropout, scaling, token type, the stem's bins, positions, embedding norm,
        dropout), with the rotary tables, the attention mask and the cache (a new one with `use_cache` and none
        passed). With a stem, the positions and the mask are the bins' (`stem.py`); with `segment_ids` (packed rows),
        positions restart at every record and attention stays within it (`segments.py`)."""
        config = self.config
        if input_ids.dim() != 2:
            raise InputError(f"input_ids must have shape (batch, length), got {tuple(input_ids.shape)}")
        batch, length = input_ids.shape
        cache = past_key_values
        if cache is None and use_cache:
            cache = KVCache(config.n_layers)
        if cache is not None and not config.causal:
            raise ConfigError("causal", False, "true", reason="a KV cache serves causal (decoder) models only")
        past = cache.seq_len if cache is not None else 0
        total = past + length
        if config.pos == "learned" and total > config.max_seq_len:
            raise InputError(f"sequence of {total} positions is longer than max_seq_len={config.max_seq_len} "
                             "of this model's learned position table")
        if attention_mask is not None and tuple(attention_mask.shape) != (batch, total):
            raise InputError(f"attention_mask must have shape (batch, past + length) = {(batch, total)}, "
                             f"got {tuple(attention_mask.shape)}")

        if segment_ids is not None:
            if attention_mask is not None or cache is not None or self.stem is not None:
                raise InputError("segment_ids (packed rows) come without attention_mask (padding is segment 0), "
                                 "without a KV cache (packing serves training and whole-sequence inference) and "
                                 "without a stem (a bin would mix the ends of two records)")
            check_segments(segment_ids, input_ids.shape)
            segment_ids = segment_ids.long()
            attention_mask = segment_ids != 0
        x = self.embed(input_ids)
        if config.token_dropout:
            x = self._token_dropout(x, input_ids, attention_mask, segment_ids)
        if config.scale_embeddings:
            x = x * math.sqrt(config.d_model)
        if self.token_type_embed is not None:  # one segment: type 0 everywhere, as HF without token_type_ids
            x = x + self.token_type_embed.weight[0]
        bins = None
        if self.stem is not None:  # no cache here: the stem is for bidirectional models
            x, bins = self.stem(x, attention_mask)
            attention_mask, length = bins.mask, x.shape[1]
            total = length
        if segment_ids is not None:
            key_positions = query_positions = segment_positions(segment_ids)
        else:
            key_positions, query_positions = self._position_ids(attention_mask, past, total, input_ids.device)
        x = self.positions.embed(x, query_positions)
        if self.embed_norm is not None:
            x = self.embed_norm(x)
        if self.dropout is not None:
            x = self.dropout(x)
        if self.embed_project is not None:
            x = self.embed_project(x)
        rotary = self.positions.rotary(query_positions, offset=past if attention_mask is None else None)
        if rotary is not None:
            rotary = rotary_for_blocks(rotary, x.dtype, batch, config.n_heads + config.n_kv_heads)
        mask, is_causal = self._attention_mask(attention_mask, query_positions, key_positions, batch, segment_ids)
        return BlockInputs(x, rotary, mask, is_causal, cache, bins)

    # --- LM head -------------------------------------------------------------------------------
    @property
    def head_weight(self) -> torch.Tensor:
        """The LM head's (vocab, d_model) matrix: the token embedding when tied."""
        if not self.config.lm_head:
            raise ConfigError("lm_head", False, reason="this model has no language-model head (its checkpoint had "
                              "none, e.g. an EsmModel or EsmForSequenceClassification): encode() and `biotf embed` "
                              "work, logits and losses need a checkpoint with one (EsmForMaskedLM)")
        return self.embed.weight if self.lm_head is None else self.lm_head.weight

    def head_input(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final hidden states after the masked-LM head transform (itself when there is none)."""
        return hidden if self.head_transform is None else self.head_transform(hidden)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The LM head on final hidden states (`encode`'s `last_hidden_state`, or some positions of it); in float32
        where `float_head` is set."""
        if self.float_head is not None:
            return F.linear(self.head_input(hidden).float(), *self.float_head)
        return F.linear(self.head_input(hidden), self.head_weight, self.lm_head_bias)

    def _token_dropout(self, x: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                       segment_ids: torch.Tensor | None = None) -> torch.Tensor:
        """ESM's token dropout, computed as HF `EsmEmbeddings` does: mask-token embeddings are zeroed (ESM-2 was
        trained treating masked tokens as dropped inputs) and each sequence is scaled by (1 - 0.15 * 0.8) /
        (1 - its observed mask ratio), the ratio counted over its real tokens (specials included, padding not); in a
        packed row each record (segment) is a sequence."""
        masked = input_ids == self.config.mask_token_id
        if segment_ids is None:
            real = attention_mask.sum(-1).clamp(min=1) if attention_mask is not None else input_ids.shape[1]
            observed = (masked.sum(-1).float() / real)[:, None]
        else:
            tokens = torch.zeros(segment_ids.shape[0], int(segment_ids.max()) + 1, device=x.device)
            per_segment = tokens.scatter_add(1, segment_ids, masked.float())
            sizes = tokens.scatter_add(1, segment_ids, torch.ones(masked.shape, device=x.device))
            observed = (per_segment / sizes.clamp(min=1)).gather(1, segment_ids)
        x = x.masked_fill(masked.unsqueeze(-1), 0.0)
        return (x * (1 - ESM_TRAINING_MASK_RATIO) / (1 - observed)[:, :, None]).to(x.dtype)

    @staticmethod
    def _position_ids(attention_mask: torch.Tensor | None, past: int, total: int,
                      device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """Position ids of all keys (past + new) and of the new queries, shape (batch or 1, length)."""
        if attention_mask is None:
            keys = torch.arange(total, device=device)[None]
        else:
            keys = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)
        return keys, keys[:, past:]

    def _attention_mask(self, attention_mask: torch.Tensor | None, query_positions: torch.Tensor,
                        key_positions: torch.Tensor, batch: int,
                        segment_ids: torch.Tensor | None = None) -> tuple[torch.Tensor | AttentionMask | None, bool]:
        """One mask for every layer: (mask, is_causal) for scaled_dot_product_attention.

        None + is_causal where SDPA can apply causality itself (no padding, no bias, no cache offset, no key outside
        the sliding window), so that its fused kernels never build a mask; otherwise `AttentionMask`'s whole block (a
        boolean 'may attend' mask, or an additive float mask when ALiBi adds a bias) when it fits
        `attention_element_budget` or is one row for every query ((B, 1, 1, K) padding: linear in the length), and
        the description itself otherwise (attention then runs in chunks), and for ALiBi alone where `alibi_blocks`
        applies above its `WHOLE_MASK_ELEMENTS` (attention then runs without the mask). Packed rows whose mask fits
        carry their records' `SegmentBatches` instead where those are estimated cheaper (`segment_call_cost`).
        """
        causal = self.config.causal
        length, total = query_positions.shape[-1], key_positions.shape[-1]
        past = total - length
        windowed = total > self.window_span  # some key lies outside a query's sliding window
        biased = self.positions.biases_attention
        budget = self.attention_element_budget
        heads = self.config.n_heads
        # SDPA computes every score (its math kernel) when attention dropout is on: too many of them, run in chunks.
        dense_scores = self.training and self.config.dropout > 0 and batch * heads * length * total > budget
        if (attention_mask is None and not biased and not windowed and not dense_scores
                and (not causal or past == 0 or length == 1)):
            return None, causal and past == 0 and length > 1
        mask = AttentionMask(query_positions, key_positions, causal, heads,
                             window=self.window_span if windowed else None,
                             key_padding=None if attention_mask is None else attention_mask.bool(),
                             bias=self.positions.attention_bias if biased else None,
                             chunk_rows=max(1, budget // (batch * heads * total)), segments=segment_ids,
                             slopes=(tuple(self.positions.slopes) if isinstance(self.positions, AlibiPositions)
                                     else None))
        if dense_scores or (mask.by_row and mask.elements() > budget):  # (one row for all queries is linear)
            return mask, False
        if Attention.alibi_blocks and mask.elements() > alibi_blocks.WHOLE_MASK_ELEMENTS:  # ALiBi without its mask
            device = query_positions.device
            dtype = torch.get_autocast_dtype(device.type) if torch.is_autocast_enabled(device.type) else \
                self.embed.weight.dtype
            if alibi_blocks.applies(mask, dtype, device, self.training and self.config.dropout > 0):
                return mask, False
        if segment_ids is not None and self.segment_call_cost is not None:  # packed rows: records apart if cheaper
            batches = SegmentBatches.of(mask, heads * self.config.head_dim, self.segment_call_cost)
            if batches is not None:
                return replace(mask, segment_batches=batches), False
        return mask.block(), False

    # --- Hugging Face checkpoints ---------------------------------------------------------------
    @classmethod
    def from_hf(cls, model_or_directory: Any, dtype: torch.dtype = torch.float32,
                materialise: Any = None) -> Transformer:
        """Load a Hugging Face model of a family biotf reads (a model object such as `Qwen2ForCausalLM` /
        `EsmForMaskedLM`, or a directory with config.json and safetensors, sharded or not, or pytorch_model.bin) into
        a biotf Transformer; see `biotf.model.hf` (`materialise`: how each parameter is made from its source,
        `hf.Materialise`)."""
        from biotf.model.hf import load_hf

        return load_hf(cls, model_or_directory, dtype=dtype, materialise=materialise)

    def to_hf(self, directory: str | PathLike, model_type: str | None = None) -> None:
        """Write a checkpoint of family `model_type` (config.json + model.safetensors) that `transformers` loads;
        None: the first family that holds this config (`biotf.model.hf.save_hf`)."""
        from biotf.model.hf import save_hf

        save_hf(self, directory, model_type)
