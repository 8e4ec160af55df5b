"""ALiBi attention over long inputs without its mask: PyTorch's CPU flash-attention kernel on blocks of keys whose
bias is a function of the key alone, merged by their log-sum-exp.

The ALiBi bias -slope_h * |i - j| is a (heads x queries x keys) tensor; built per chunk of queries it costs more
than the attention itself, and SDPA's kernel reads it again in backward (protein-small's training step at 8k tokens:
33.5 CPU seconds with the chunks' masks, 6.9 without). But for query rows [a, b) at positions p..p + r:
- a key j before the rows (j < p) has bias -s (i - j) = s (j - p) - s (i - p): a (heads, 1, keys) row shared by all
  query rows, plus a constant per row;
- a key after them (j >= p + r, bidirectional only) has bias s (p + r - j) + s (i - p - r), the same form;
- the keys of the rows themselves (p <= j < p + r) see the (heads, r, r) diagonal block, the same for every chunk of
  r rows (it depends on i - p and j - p alone): built once per layer.
A constant per row changes no probability: the kernel runs each block with its row-shared mask (or the diagonal
block), and the row constants are added to the block's log-sum-exp, which weighs the blocks' outputs into the
whole softmax's (flash attention's merge). Backward calls the kernel's backward per block with the merged output and
log-sum-exp (minus the block's constant), which gives each block's exact share of the gradients (as ring attention
does). Nothing of size queries x keys is built or kept: memory is linear in the length, and nothing is recomputed.

Denormal floats are flushed to zero while the kernel runs (and the setting restored): the steep heads' far keys
give probabilities below float32's smallest normal number (exp(-88)), whose arithmetic costs the CPU many times a
normal one's; in backward, where the blocks' scores are taken against the whole row's log-sum-exp, whole blocks are
such numbers (protein-small at 8k tokens: the blocks' backward 3.2-3.3x slower without the flush). What the flush
drops is under 1e-38, far below float32's rounding of the sums it joins.

Positions are relative to the chunk's first row, so the row masks stay small where probabilities are not
negligible: outputs and gradients equal the whole masked call's to float32 rounding (tests/model/test_alibi_blocks.py).
Float32 on the CPU only (the kernel is PyTorch's `_scaled_dot_product_flash_attention_for_cpu`); the caller
(`Attention`) takes its chunked masked path otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from biotf.model.attention_mask import AttentionMask

FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
FLASH_BACKWARD = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward

# Query rows per block: the diagonal block is heads x ROWS^2 floats (4 MiB at 4 heads), each chunk three kernel calls.
# On protein-small's shape at 8k and 16k tokens, one thread of a loaded 2-core machine, 256 to 2,048 rows ran within
# 20% of each other (1,024 fastest, 512 second) and as fast as SDPA without any mask; docs/benchmarks.md has 512's.
ROWS = 512

# Above this many elements of the whole mask (heads x queries x keys: 1,024 tokens at 4 heads) ALiBi attention runs
# in blocks even where its mask would fit `Transformer.attention_element_budget` (docs/benchmarks.md: at 4k tokens
# the training step took as long with the whole mask as with the blocks at 8k).
WHOLE_MASK_ELEMENTS = 2 ** 22


def applies(mask: AttentionMask, dtype: torch.dtype, device: torch.device, dropout: bool) -> bool:
    """Whether attention under `mask` can run in blocks: ALiBi and causality alone (`AttentionMask.alibi_alone`),
    float32 on the CPU (the kernel), no attention dropout (it has none)."""
    return mask.alibi_alone and dtype == torch.float32 and device.type == "cpu" and not dropout


Block = tuple[int, int, torch.Tensor, torch.Tensor | None]  # key start, key stop, mask, row constant (heads, rows)


def blocks(slopes: torch.Tensor, diagonal: torch.Tensor, first: int, rows: int, keys: int, causal: bool) -> list[Block]:
    """The key blocks of query rows at positions [first, first + rows): before them, their own, after them."""
    found: list[Block] = []
    offsets = torch.arange(rows, dtype=torch.float32, device=slopes.device)
    if first > 0:
        before = torch.arange(-first, 0, dtype=torch.float32, device=slopes.device)
        found.append((0, first, (slopes[:, None] * before)[None, :, None], -slopes[:, None] * offsets))
    found.append((first, first + rows, diagonal[:, :, :rows, :rows], None))
    last = first + rows
    if not causal and last < keys:
        after = torch.arange(0, keys - last, dtype=torch.float32, device=slopes.device)
        found.append((last, keys, (-slopes[:, None] * after)[None, :, None], slopes[:, None] * (offsets - rows)))
    return found


def diagonal_block(slopes: torch.Tensor, rows: int, causal: bool) -> torch.Tensor:
    """(1, heads, rows, rows): the bias of a chunk's rows on their own keys, -inf after the row where causal."""
    index = torch.arange(rows, dtype=torch.float32, device=slopes.device)
    distance = index[:, None] - index[None, :]
    bias = -slopes[:, None, None] * (distance.clamp(min=0) if causal else distance.abs())
    return (bias.masked_fill(distance < 0, float("-inf")) if causal else bias)[None]


@contextmanager
def flushed_denormals() -> Iterator[None]:
    """Denormal floats read and written as zero inside the block (`torch.set_flush_denormal`), the caller's setting
    restored after; it has no getter, so a denormal is multiplied to tell whether it was on."""
    was_on = bool(torch.tensor([1e-39]).mul(1.0).item() == 0.0)
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(was_on)


class AlibiBlocks(torch.autograd.Function):
    """Attention of queries (B, H, T, D) at positions keys - T .. keys - 1 over keys and values (B, H, keys, D)
    with the ALiBi bias of `slopes` (H,), `rows` queries at a time (module docstring); `report(rows done, rows)`
    is told after each chunk of the forward."""

    @staticmethod
    @flushed_denormals()
    def forward(ctx, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slopes: torch.Tensor, causal: bool,
                rows: int, scale: float | None, report: Callable[[int, int], None] | None = None) -> torch.Tensor:
        keys, past = k.shape[2], k.shape[2] - q.shape[2]
        diagonal = diagonal_block(slopes, min(rows, q.shape[2]), causal)
        outputs, log_sums = [], []
        for start in range(0, q.shape[2], rows):
            chunk = q[:, :, start:start + rows]
            merged_out = merged_log_sum = None
            for key_start, key_stop, mask, constant in blocks(slopes, diagonal, past + start, chunk.shape[2], keys,
                                                              causal):
                out, log_sum = FLASH(chunk, k[:, :, key_start:key_stop], v[:, :, key_start:key_stop],
                                     attn_mask=mask, scale=scale)
                if constant is not None:
                    log_sum = log_sum + constant
                if merged_out is None:
                    merged_out, merged_log_sum = out, log_sum
                    continue
                total = torch.logaddexp(merged_log_sum, log_sum)
                merged_out = (merged_out * (merged_log_sum - total).exp_()[..., None]
                              + out * (log_sum - total).exp_()[..., None])
                merged_log_sum = total
            outputs.append(merged_out)
            log_sums.append(merged_log_sum)
            if report is not None:
                report(start + chunk.shape[2], q.shape[2])
        output, log_sum = torch.cat(outputs, dim=2), torch.cat(log_sums, dim=2)
        ctx.save_for_backward(q, k, v, output, log_sum, slopes, diagonal)
        ctx.options = (causal, rows, scale)
        return output

    @staticmethod
    @flushed_denormals()
    def backward(ctx, grad: torch.Tensor):
        q, k, v, output, log_sum, slopes, diagonal = ctx.saved_tensors
        causal, rows, scale = ctx.options
        keys, past = k.shape[2], k.shape[2] - q.shape[2]
        grad = grad.contiguous()
        grad_q, grad_k, grad_v = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for start in range(0, q.shape[2], rows):
            stop = min(start + rows, q.shape[2])
            for key_start, key_stop, mask, constant in blocks(slopes, diagonal, past + start, stop - start, keys,
                                                              causal):
                block_log_sum = log_sum[:, :, start:stop]
                if constant is not None:
                    block_log_sum = block_log_sum - constant
                dq, dk, dv = FLASH_BACKWARD(grad[:, :, start:stop], q[:, :, start:stop],
                                            k[:, :, key_start:key_stop], v[:, :, key_start:key_stop],
                                            output[:, :, start:stop], block_log_sum, 0.0, False, attn_mask=mask,
                                            scale=scale)
                grad_q[:, :, start:stop] += dq
                grad_k[:, :, key_start:key_stop] += dk
                grad_v[:, :, key_start:key_stop] += dv
        return grad_q, grad_k, grad_v, None, None, None, None, None
