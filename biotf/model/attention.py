"""Multi-head self-attention with grouped key/value heads (MHA, GQA, MQA by `n_kv_heads`).

Queries, keys and values come from one fused projection `qkv` whose rows are [q heads; k heads;
v heads] (`hf.py` maps HF's separate q_proj/k_proj/v_proj onto it); its bias is `qkv_bias`, the
output projection's is `bias` (HF Qwen2: q/k/v have a bias, o_proj does not). With `qk_norm` the queries and
keys are normalised over their full width (every head at once) before the heads are split and rotated (ESM C).
Scores go through `torch.nn.functional.scaled_dot_product_attention`; the mask (padding, causality and an ALiBi bias)
is built once per forward by the transformer and shared by every layer.

Long inputs: where that mask would be too large to build, the transformer passes its description instead
(`attention_mask.AttentionMask`), and SDPA runs on `chunk_rows` queries at a time with the mask of those rows only,
so memory grows with the length, not its square. In training each chunk is recomputed in backward
(torch.utils.checkpoint) rather than keeping every chunk's mask and, in PyTorch's math kernel, scores; the chunks'
outputs equal the whole call's up to float rounding (the same softmax over the same keys).

Packed rows (segment ids) whose records are cheaper attended apart than through the block-diagonal mask carry
`AttentionMask.segment_batches`: SDPA then runs once per bucket of records gathered out of the rows
(`attention_mask.SegmentBatches`), mostly without a mask, and the outputs go back to the rows.

Attention probabilities are computed only when asked (`attentions`, a list the layer appends its own to): then
an explicit softmax(q k^T / sqrt(head_dim) + mask) path runs instead of SDPA, which never materialises them.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from biotf.model import alibi_blocks
from biotf.model.alibi_blocks import AlibiBlocks
from biotf.model.attention_mask import AttentionMask, SegmentBatches
from biotf.model.kv_cache import KVCache
from biotf.model.config import TransformerConfig
from biotf.model.norms import build_norm
from biotf.model.positions import apply_rotary


# PyTorch's CPU flash-attention kernel is slow backwards in bfloat16 when each head's keys are short: at 128 keys of
# 32 dimensions its forward + backward takes 2.5x the float32 kernel's (upcast and cast back included), at 512 keys
# about as long, at 1,024 0.88x; at 64 dimensions the crossover is near 128 keys (`bench.py model`'s attention rows,
# docs/benchmarks.md).
# Where keys x head_dim is at most this, bf16 queries, keys and values that need gradients on the CPU go through
# float32 attention; the forward alone (inference) is faster in bf16 at every size and stays there.
UPCAST_KEYS_BY_DIM = 8192


def upcast_for_backward(q: torch.Tensor, k: torch.Tensor) -> bool:
    """Whether this SDPA call runs in float32: bf16 on the CPU, with gradients, short keys (UPCAST_KEYS_BY_DIM)."""
    return (q.dtype == torch.bfloat16 and q.device.type == "cpu" and torch.is_grad_enabled()
            and (q.requires_grad or k.requires_grad) and k.shape[-2] * q.shape[-1] <= UPCAST_KEYS_BY_DIM)


class Attention(nn.Module):
    # Chunked ALiBi attention without its mask (`alibi_blocks`) where it applies; False runs the masked chunks
    # (`bench.py long` times both). The outputs are the same either way (up to float rounding).
    alibi_blocks = True

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = config.n_heads, config.n_kv_heads, config.head_dim
        self.dropout = config.dropout
        # None: SDPA's default 1 / sqrt(head_dim); 1.0 for T5's unscaled scores (`scale_attention: false`).
        self.scale = None if config.scale_attention else 1.0
        self.qkv = nn.Linear(config.d_model, (config.n_heads + 2 * config.n_kv_heads) * config.head_dim,
                             bias=config.qkv_bias)
        self.out = nn.Linear(config.n_heads * config.head_dim, config.d_model, bias=config.bias)
        # qk_norm: queries and keys normalised over all their heads' width at once, without bias (ESM C's q_norm,
        # k_norm); None when off.
        self.q_norm = build_norm(config, config.n_heads * config.head_dim, bias=False) if config.qk_norm else None
        self.k_norm = build_norm(config, config.n_kv_heads * config.head_dim, bias=False) if config.qk_norm else None
        # Told (query rows done, rows) after each chunk of chunked attention, where one layer over a long record can
        # take minutes, and told () once the heads are done; set while a command reports progress
        # (`biotf.progress.layer_notes`).
        self.report_rows: Callable[[int, int], None] | None = None
        self.report_done: Callable[[], None] | None = None

    def forward(self, x: torch.Tensor, rotary: tuple[torch.Tensor, ...] | None,
                mask: torch.Tensor | AttentionMask | None, is_causal: bool, cache: KVCache | None = None,
                layer: int = 0, attentions: list[torch.Tensor] | None = None) -> torch.Tensor:
        """The heads' outputs (`heads`) through the output projection `out`."""
        return self.out(self.heads(x, rotary, mask, is_causal, cache, layer, attentions))

    def heads(self, x: torch.Tensor, rotary: tuple[torch.Tensor, ...] | None,
              mask: torch.Tensor | AttentionMask | None, is_causal: bool, cache: KVCache | None = None,
              layer: int = 0, attentions: list[torch.Tensor] | None = None) -> torch.Tensor:
        """The heads' outputs side by side, (B, T, n_heads * head_dim), before the output projection (a block adds
        its residual inside that product where it can). x: (B, T, d_model); rotary: the tables of
        `positions.rotary_for_blocks`; mask: bool (allowed) or float (additive) broadcastable to (B, n_heads, T,
        keys), or None with `is_causal` for the plain case, or the description of a mask too large to build
        (attention then runs in chunks of queries). With a list `attentions`, this layer's (B, n_heads, T, keys)
        float32 probabilities are appended to it."""
        batch, length, _ = x.shape
        qkv = self.qkv(x)
        if self.q_norm is not None:
            kv_width = self.n_kv_heads * self.head_dim
            q, k, v = qkv.split_with_sizes((self.n_heads * self.head_dim, kv_width, kv_width), dim=-1)
            qkv = torch.cat((self.q_norm(q), self.k_norm(k), v), dim=-1)
        qkv = qkv.view(batch, length, self.n_heads + 2 * self.n_kv_heads, self.head_dim)
        # `split_with_sizes`, not slicing: its backward writes the pieces' gradients into one tensor with a single
        # cat, where each slice's backward would zero-fill a full-size gradient and add them up. (Called directly:
        # `Tensor.split`'s Python wrapper costs as much again, paid a few hundred times per decoded token.)
        qk, v = qkv.split_with_sizes((self.n_heads + self.n_kv_heads, self.n_kv_heads), dim=2)
        if rotary is not None:
            # Rotate queries and keys together: one pass over (B, T, n_heads + n_kv_heads, head_dim).
            qk = apply_rotary(qk, *rotary)
        q, k = qk.transpose(1, 2).split_with_sizes((self.n_heads, self.n_kv_heads), dim=1)
        v = v.transpose(1, 2)
        if cache is not None:
            k, v = cache.update(layer, k, v)
        if attentions is not None:  # the probabilities are the L x L matrix: the mask is built whole
            y = self._explicit(q, k, v, mask.block() if isinstance(mask, AttentionMask) else mask, is_causal,
                               attentions)
        elif isinstance(mask, AttentionMask):
            y = self._chunked(q, k, v, mask) if mask.segment_batches is None else self._batched(q, k, v,
                                                                                                mask.segment_batches)
        else:
            y = self._sdpa(q, k, v, mask, is_causal)
        if self.report_done is not None:
            self.report_done()
        return y.transpose(1, 2).reshape(batch, length, self.n_heads * self.head_dim)

    def _sdpa(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
              is_causal: bool) -> torch.Tensor:
        if upcast_for_backward(q, k):
            with torch.autocast("cpu", enabled=False):
                return self._sdpa(q.float(), k.float(), v.float(), mask, is_causal).to(q.dtype)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                              dropout_p=self.dropout if self.training else 0.0, scale=self.scale,
                                              enable_gqa=self.n_kv_heads != self.n_heads)

    def _chunked(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: AttentionMask) -> torch.Tensor:
        """SDPA over `mask.chunk_rows` queries at a time, each on the keys its rows may see with their mask block.
        `split`, not slicing, for the queries: one cat in backward instead of a zero-filled full gradient per chunk.
        With gradients, each chunk is recomputed in backward (RNG restored: attention dropout repeats), so that
        what backward keeps is the queries, keys and values, not every chunk's mask and scores.
        ALiBi alone in float32 on the CPU skips the mask: `alibi_blocks` (PyTorch's flash kernel, nothing
        recomputed)."""
        if self.alibi_blocks and alibi_blocks.applies(mask, q.dtype, q.device, self.training and self.dropout > 0):
            group = self.n_heads // self.n_kv_heads
            if group > 1:
                k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            slopes = torch.tensor(mask.slopes, dtype=torch.float32, device=q.device)
            # The diagonal block (heads x rows^2) within the element budget, as the chunks' masks are.
            rows = max(1, min(alibi_blocks.ROWS, math.isqrt(mask.chunk_rows * mask.keys)))
            return AlibiBlocks.apply(q, k, v, slopes, mask.causal, rows, self.scale, self.report_rows)
        recompute = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
        outputs, start = [], 0
        for rows in q.split(mask.chunk_rows, dim=2):
            stop = start + rows.shape[2]
            if recompute:
                outputs.append(checkpoint(self._rows, rows, k, v, mask, start, stop, use_reentrant=False))
            else:
                outputs.append(self._rows(rows, k, v, mask, start, stop))
            if self.report_rows is not None:
                self.report_rows(stop, q.shape[2])
            start = stop
        return torch.cat(outputs, dim=2)

    def _batched(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, batches: SegmentBatches) -> torch.Tensor:
        """SDPA per bucket of records (`SegmentBatches`): one gather of each of q, k, v out of the rows (one scatter
        back in backward), a `split` into buckets (one cat in backward), one call per bucket, one cat of the outputs
        and one copy of them to their tokens (padding slots to one spare row, dropped); padding tokens get 0. One
        copy, not one per bucket: each call waits for every thread, which costs most where other jobs share the
        cores."""
        if batches.whole:
            return self._sdpa(q, k, v, *batches.masks[0])
        batch, heads, length, dim = q.shape
        pieces = [t.transpose(1, 2).reshape(batch * length, t.shape[1], dim).index_select(0, batches.index)
                  .split_with_sizes([count * longest for count, longest in batches.shapes]) for t in (q, k, v)]
        outputs = []
        for (count, longest), mask, *bucket in zip(batches.shapes, batches.masks, *pieces):
            q_, k_, v_ = (t.view(count, longest, t.shape[1], dim).transpose(1, 2) for t in bucket)
            outputs.append(self._sdpa(q_, k_, v_, *mask).transpose(1, 2).reshape(count * longest, heads, dim))
        y = q.new_zeros(batch * length + 1, heads, dim).index_copy_(0, batches.targets, torch.cat(outputs))
        return y[:-1].view(batch, length, heads, dim).transpose(1, 2)

    def _rows(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: AttentionMask, start: int,
              stop: int) -> torch.Tensor:
        """Attention of query rows [start, stop) (`q` holds those rows only)."""
        first, end, block = mask.chunk(start, stop)
        return self._sdpa(q, k[:, :, first:end], v[:, :, first:end], block, False)

    def _explicit(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                  is_causal: bool, attentions: list[torch.Tensor]) -> torch.Tensor:
        """What SDPA computes, with the probabilities (after dropout, as used) appended to `attentions`: scores and
        softmax in float32 (HF's eager attention's precision). Key/value heads serve groups of consecutive query
        heads, as SDPA's `enable_gqa` and HF's `repeat_kv` have it."""
        group = self.n_heads // self.n_kv_heads
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * (self.scale or self.head_dim ** -0.5)
        if is_causal:
            mask = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).tril()
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
        probabilities = scores.softmax(dim=-1)
        if self.training and self.dropout > 0:
            probabilities = F.dropout(probabilities, self.dropout)
        attentions.append(probabilities)
        return torch.matmul(probabilities.to(v.dtype), v)
