"""Many small scoring queries, few forward passes: rows packed by a token budget, log-probabilities gathered.

Every scoring method reduces to rows: token ids to run through the model, the positions whose output
distributions it needs, and which token ids to read there (or the whole vocabulary). A pseudo-log-likelihood
is one row per masked copy; a causal log-likelihood one row per window; a masked marginal one row per set of
masked positions. Rows are sorted by length and packed into batches of at most `batch_tokens` padded
tokens, so hundreds of masked copies share one forward instead of one forward each (the plain loop).
Padding is masked out of attention, so a row's log-probabilities do not depend on its batch mates
(tests check batched == one at a time to 1e-5). With packing (`biotf.data.packing`, as `biotf embed --packing`)
several rows share one row of the model, each alone in its segment with its positions from 0: a masked copy of a
short protein no longer pads to the longest row of its batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from biotf.data.packing import fill_rows, inference_batches
from biotf.model import Transformer


@dataclass
class Row:
    """`ids` go through the model; the distributions at `predict_at` are read at `targets` ((n, m) ids), or
    whole (n, vocab) when `targets` is None."""

    ids: np.ndarray
    predict_at: np.ndarray
    targets: np.ndarray | None = None


def row_log_probs(model: Transformer, rows: Sequence[Row], batch_tokens: int, pad_id: int,
                  progress=None, packing: bool = False) -> list[np.ndarray]:
    """Log-probabilities (float64) of every row, in the order of `rows`; `progress` (a `biotf.progress.Progress` or
    None) counts predicted positions. `packing`: several rows share one row of the model, each alone in its segment."""
    results: list[np.ndarray | None] = [None] * len(rows)
    ran = 0
    for batch in inference_batches([len(row.ids) for row in rows], batch_tokens, packing):
        order = [index for packed in batch for index in packed]
        _run(model, rows, order, batch, pad_id, packing, results)
        if progress is not None:  # one long record is many rows (masked copies, windows)
            ran += len(order)
            progress.update(sum(len(rows[index].predict_at) for index in order),
                            f"rows {ran:,}/{len(rows):,} of these records")
    return results  # type: ignore[return-value]


def _run(model: Transformer, rows: Sequence[Row], order: list[int], batch: list[list[int]], pad_id: int,
         packing: bool, results: list[np.ndarray | None]) -> None:
    """One forward of `batch` (model rows of indices into `rows`, `order` those indices flattened)."""
    filled = fill_rows([[rows[index].ids for index in packed] for packed in batch], pad_id, packing)
    counts = [len(rows[index].predict_at) for index in order]
    which = np.repeat([row for row, _, _ in filled.spans], counts)
    where = np.concatenate([rows[index].predict_at + start for index, (_, start, _) in zip(order, filled.spans)])
    device = model.device
    with torch.inference_mode():
        # The last block past its attention and the LM head at the positions read only: a masked copy reads one of
        # its L positions.
        read = torch.from_numpy(which * filled.ids.shape[1] + where).to(device)
        logits = model.logits(model.states_at(torch.from_numpy(filled.ids).to(device), read, **filled.inputs(device)))
        picked = torch.log_softmax(logits.float(), dim=-1).double().cpu().numpy()
    start = 0
    for index, count in zip(order, counts):
        block = picked[start:start + count]
        targets = rows[index].targets
        results[index] = block if targets is None else np.take_along_axis(block, targets, axis=1)
        start += count
