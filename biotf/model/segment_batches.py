"""`SegmentBatches`: the records of packed rows attended as a few batches of their own, instead of through a
block-diagonal mask over whole rows.

With the mask, SDPA scores every query of a row against all L keys of the row (L^2 a row, most of them hidden) and
takes its masked kernel, which also reads the mask (on a CPU core 10-17% slower per score than the unmasked one at
protein-small's shape). The records need only sum(l_i^2). Here each layer gathers the records' queries, keys and
values out of their rows (one `index_select` each), runs one SDPA call per bucket of records of similar length, padded
to the bucket's longest, and scatters the outputs back (one `index_copy`). A bucket's mask is its own: none when its
records are of one length (or causal: a right-padded record's queries never reach its padding), so SDPA's unmasked
kernel runs, a (records, 1, 1, longest) padding mask otherwise, and with ALiBi or a sliding window the bias and
window of one record (positions restart at 0 in every record, so they are the same for all of a bucket). Each query
sees the keys the whole mask lets it see, with the same bias: outputs and gradients equal the masked call's to float
rounding. Padding tokens (segment 0) get output 0 (their outputs are unspecified, as with the mask).

Buckets: records sorted by length, longest first; a record joins the current bucket while padding it to the bucket's
longest adds at most a quarter of that slot's work or less than one call's fixed cost, else it opens a bucket.
`SegmentBatches.of` returns None where the whole mask is estimated cheaper: work counted in score multiply-adds
(queries x keys x head dims), each call charged `call_cost` (its fixed cost, Python and SDPA's own, forward and
backward: ~40 us on a CPU core, the attention of a 32-token record at 4 heads of 32), the gather, the scatter and
their autograd nodes GATHER_CALLS calls more (~0.3-0.4 ms measured on small batches), against the mask's work and
its one call. So a few short rows stay on the mask (attention that small costs less than the fixed costs: 8 rows of
64 tokens ran 1.3 ms with the mask, 1.6-2.0 ms apart), and rows that each hold one whole record are one bucket taken
as they are, without a gather and without the mask.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from biotf.model.attention_mask import AttentionMask
from biotf.model.segments import segment_runs

# One SDPA call's fixed cost in score multiply-adds (32^2 scores x 128 head dims), and the gather and scatter's in
# calls.
CALL_COST = 2 ** 17
GATHER_CALLS = 24


@dataclass(frozen=True, eq=False)
class SegmentBatches:
    """index: (slots,) positions in the flattened (batch x length) tokens, bucket after bucket, each bucket's
    (records, longest) slots row-major; a padding slot repeats its record's first token. real: (slots,) bool, False
    for padding slots, or None where no bucket is padded. tokens: index[real], where the outputs go. shapes: (records,
    longest) per bucket. masks: per bucket SDPA's (attn_mask, is_causal). whole: the rows themselves are the one
    bucket (each row one record, no padding): no gather, no scatter."""

    index: torch.Tensor
    real: torch.Tensor | None
    tokens: torch.Tensor
    shapes: list[tuple[int, int]]
    masks: list[tuple[torch.Tensor | None, bool]]
    whole: bool

    @classmethod
    def of(cls, mask: AttentionMask, head_dims: int, call_cost: int = CALL_COST) -> SegmentBatches | None:
        """The buckets of `mask.segments`' records (see the module docstring), or None where the whole mask is
        estimated cheaper. `head_dims`: heads x head_dim, what one score costs in multiply-adds."""
        rows, length = mask.segments.shape
        starts, lengths = segment_runs(mask.segments)
        if not lengths:  # rows of padding alone
            return None
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])  # stable: whole rows stay in row order
        slack = call_cost / head_dims  # one call's cost in (query x key) scores
        buckets: list[list[int]] = []
        for i in order:
            if buckets:
                longest = lengths[buckets[-1][0]]
                if longest ** 2 - lengths[i] ** 2 <= max(longest ** 2 / 4, slack):
                    buckets[-1].append(i)
                    continue
            buckets.append([i])
        shapes = [(len(bucket), lengths[bucket[0]]) for bucket in buckets]
        whole = len(lengths) == rows and min(lengths) == length  # each row one record
        work = sum(count * longest ** 2 for count, longest in shapes) * head_dims
        if not whole and work + (len(shapes) + GATHER_CALLS) * call_cost > rows * length ** 2 * head_dims + call_cost:
            return None
        device = mask.segments.device
        index, real = [], []
        for bucket, (count, longest) in zip(buckets, shapes):
            first = torch.tensor([starts[i] for i in bucket], device=device)[:, None]
            size = torch.tensor([lengths[i] for i in bucket], device=device)[:, None]
            offset = torch.arange(longest, device=device)[None]
            inside = offset < size
            index.append((first + offset * inside).reshape(-1))
            real.append(inside.reshape(-1))
        index, real = torch.cat(index), torch.cat(real)
        padded = not bool(real.all())
        masks = [cls._bucket_mask(mask, longest, lengths[bucket[-1]] < longest, real_slots.view(len(bucket), longest))
                 for bucket, (_, longest), real_slots in zip(buckets, shapes, real.split([c * l for c, l in shapes]))]
        return cls(index, real if padded else None, index[real] if padded else index, shapes, masks, whole)

    @staticmethod
    def _bucket_mask(mask: AttentionMask, longest: int, padded: bool,
                     real: torch.Tensor) -> tuple[torch.Tensor | None, bool]:
        """SDPA's (attn_mask, is_causal) for one bucket: its records' own causality, window and bias, and its padding
        keys hidden (not needed when causal: a record's queries precede its padding)."""
        window = mask.window if mask.window is not None and longest > mask.window else None
        key_padding = real if padded and not mask.causal else None
        if mask.bias is None and window is None and key_padding is None:
            return None, mask.causal
        positions = torch.arange(longest, device=real.device)[None]
        bucket = AttentionMask(positions, positions, mask.causal, mask.heads, window=window, key_padding=key_padding,
                               bias=mask.bias)
        return bucket.block(), False
