"""`AttentionMask`: which keys each query may see, and the bias added to their scores, described rather than built;
`SegmentBatches`: packed records attended apart (below).

A materialised mask costs (batch or 1) x (heads or 1) x queries x keys elements: at 100k tokens with an ALiBi bias
that is tens of GB, more than the rest of the forward together. The description holds only what the mask is made
of, each O(batch x keys):
- `causal` (a query sees keys up to its own index) and `window` (and only the last `window` of them; Mistral's
  sliding window, by index as HF has it);
- `key_padding`: (batch, keys) bool, True for real keys; padded keys are hidden from every query;
- `bias`: the position scheme's `attention_bias(query_positions, key_positions, causal)` (ALiBi: the slopes times
  the distance of the position ids), evaluated on the rows and keys of a block only;
- `query_positions` (batch or 1, queries) and `key_positions` (batch or 1, keys): the keys are the cached ones and
  then the queries' own, so query row i has key index past + i, past = keys - queries.
- `segments`: (batch, keys) integer segment ids of packed rows (several records in one row): a query sees the keys
  of its own segment only, so attention is block-diagonal (and causal within a record for a causal model), hidden in
  `_visible` as padding is. Padding is segment 0 and is also `key_padding`.
- `slopes`: where the bias is ALiBi's (-slope_h x distance), its slopes, so that attention over a long input can
  skip the mask (`alibi_alone`, `alibi_blocks`);
- `segment_batches`: where the transformer found it cheaper than the whole mask, the records of the packed rows
  gathered into batches of their own (`SegmentBatches`, below): attention then runs on those, and `block()`
  serves only the explicit path that returns attention probabilities.

`block()` materialises the mask, what `scaled_dot_product_attention` takes as `attn_mask`: a bool 'may attend' mask,
or an additive float mask when there is a bias; it is what the transformer built before this module existed, value
for value. `chunk(start, stop)` gives the rows [start, stop) alone, over the keys they can see, for `Attention` to run
`chunk_rows` queries at a time when the whole would not fit in memory.
A query row that sees no key (a left pad of a causal model, a row of padding) is allowed every key instead, so that
softmax stays finite; such rows are padding, and no real token attends to them (a causal model's last left pad
predicts the first real token, though: so it sees every key in a chunk too, and chunks give the whole's loss).

`SegmentBatches` (here, beside the mask it is built from and travels in): the records of packed rows attended as
a few batches of their own, instead of through a block-diagonal mask over whole rows.

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

from collections.abc import Callable
from dataclasses import dataclass

import torch

from biotf.model.segments import segment_runs

Bias = Callable[[torch.Tensor, torch.Tensor, bool], torch.Tensor]


@dataclass(frozen=True, eq=False)
class AttentionMask:
    """See the module docstring. `heads`: query heads (a bias has one row per head); `chunk_rows`: how many query
    rows one attention call takes when attention runs in chunks (set by whoever sizes the work: `Transformer`)."""

    query_positions: torch.Tensor
    key_positions: torch.Tensor
    causal: bool
    heads: int
    window: int | None = None
    key_padding: torch.Tensor | None = None
    bias: Bias | None = None
    chunk_rows: int | None = None
    segments: torch.Tensor | None = None
    segment_batches: SegmentBatches | None = None
    slopes: tuple[float, ...] | None = None

    @property
    def alibi_alone(self) -> bool:
        """Whether the mask is ALiBi's bias (`slopes`) and causality alone, on positions that are the key indices
        (no padding, segments or window): attention can then run without it (`alibi_blocks`)."""
        return self.slopes is not None and self.key_padding is None and self.segments is None and self.window is None

    @property
    def queries(self) -> int:
        return self.query_positions.shape[-1]

    @property
    def keys(self) -> int:
        return self.key_positions.shape[-1]

    @property
    def past(self) -> int:
        return self.keys - self.queries

    @property
    def by_row(self) -> bool:
        """Whether rows differ: without causality, a window or a bias every query sees the same keys, and the
        mask is one row broadcast over all queries."""
        return self.causal_rows or self.bias is not None or self.segments is not None

    @property
    def causal_rows(self) -> bool:
        """Whether causality or the window hides keys from some row (one query after a full cache sees them all)."""
        return self.causal and (self.queries > 1 or self.window is not None)

    def elements(self) -> int:
        """Elements of the whole mask: what `block()` costs."""
        batch = 1
        if self.key_padding is not None or self.segments is not None:
            batch = (self.key_padding if self.key_padding is not None else self.segments).shape[0]
        elif self.bias is not None:
            batch = max(self.query_positions.shape[0], self.key_positions.shape[0])
        return batch * (self.heads if self.bias is not None else 1) * (self.queries if self.by_row else 1) * self.keys

    def block(self) -> torch.Tensor | None:
        """The whole mask, (batch or 1, heads or 1, queries or 1, keys), bool or (with a bias) float32 additive; None
        when nothing is hidden and nothing added."""
        allowed = self._visible(0, self.queries, 0, self.keys)
        if self.key_padding is not None:
            allowed = allowed | ~allowed.any(dim=-1, keepdim=True)
        return self._biased(allowed, 0, self.queries, 0, self.keys)

    def chunk(self, start: int, stop: int) -> tuple[int, int, torch.Tensor | None]:
        """The keys [first, end) that query rows [start, stop) attend to, and the mask of those rows over them.

        Only the keys that causality and the window leave to some row of the chunk: a causal chunk skips the keys
        after its last row, a windowed one those before its first row's window. A row that sees no key sees every
        key, as in the whole `block`, so a chunk with such a row spans every key."""
        first, end = 0, self.keys
        if self.causal:
            end = self.past + stop
            if self.window is not None:
                first = max(0, self.past + start - self.window + 1)
        allowed = self._visible(start, stop, first, end)
        if self.key_padding is not None:
            blind = ~allowed.any(dim=-1, keepdim=True)
            if (first, end) != (0, self.keys) and bool(blind.any()):
                first, end = 0, self.keys
                allowed = self._visible(start, stop, first, end)
                blind = ~allowed.any(dim=-1, keepdim=True)
            allowed = allowed | blind
        return first, end, self._biased(allowed, start, stop, first, end)

    def _visible(self, start: int, stop: int, key_start: int, key_stop: int) -> torch.Tensor | None:
        """Bool (batch or 1, 1, rows or 1, keys): which keys of [key_start, key_stop) rows [start, stop) may see by
        causality, the window, padding and segments; None when all."""
        allowed = None
        if self.causal_rows:
            device = self.query_positions.device
            query_index = torch.arange(self.past + start, self.past + stop, device=device)[:, None]
            key_index = torch.arange(key_start, key_stop, device=device)[None, :]
            allowed = key_index <= query_index
            if self.window is not None:
                allowed = allowed & (key_index > query_index - self.window)
            allowed = allowed[None, None]  # (1, 1, rows, keys)
        if self.key_padding is not None:
            keys = self.key_padding[:, None, None, key_start:key_stop]  # (B, 1, 1, keys)
            allowed = keys if allowed is None else allowed & keys
        if self.segments is not None:
            rows = self.segments[:, None, self.past + start:self.past + stop, None]  # (B, 1, rows, 1)
            same = rows == self.segments[:, None, None, key_start:key_stop]  # (B, 1, rows, keys)
            allowed = same if allowed is None else allowed & same
        return allowed

    def _biased(self, allowed: torch.Tensor | None, start: int, stop: int, key_start: int,
                key_stop: int) -> torch.Tensor | None:
        """`allowed` as SDPA's attn_mask: itself without a bias, else the bias of those rows and keys, -inf where
        not allowed."""
        if self.bias is None:
            return allowed
        bias = self.bias(self.query_positions[:, start:stop], self.key_positions[:, key_start:key_stop], self.causal)
        return bias if allowed is None else bias.masked_fill(~allowed, float("-inf"))


# One SDPA call's fixed cost in score multiply-adds (32^2 scores x 128 head dims), and the gather and scatter's in
# calls.
CALL_COST = 2 ** 17
GATHER_CALLS = 24


@dataclass(frozen=True, eq=False)
class SegmentBatches:
    """index: (slots,) positions in the flattened (batch x length) tokens, bucket after bucket, each bucket's
    (records, longest) slots row-major; a padding slot repeats its record's first token. targets: where each slot's
    output goes: its token, or for a padding slot batch x length, one row past the tokens that the outputs drop.
    shapes: (records, longest) per bucket. masks: per bucket SDPA's (attn_mask, is_causal). whole: the rows themselves
    are the one bucket (each row one record, no padding): no gather, no scatter."""

    index: torch.Tensor
    targets: torch.Tensor
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
        masks = [cls._bucket_mask(mask, longest, lengths[bucket[-1]] < longest, real_slots.view(len(bucket), longest))
                 for bucket, (_, longest), real_slots in zip(buckets, shapes, real.split([c * l for c, l in shapes]))]
        return cls(index, index.masked_fill(~real, rows * length), shapes, masks, whole)

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
