"""Many small scoring queries, few forward passes: rows packed by a token budget, log-probabilities gathered.

Every scoring method reduces to rows: token ids to run through the model, the positions whose output
distributions it needs, and which token ids to read there (or the whole vocabulary). A pseudo-log-likelihood
is one row per masked copy; a causal log-likelihood one row per window; a masked marginal one row per set of
masked positions. Rows are sorted by length and packed into batches of at most `batch_tokens` padded
tokens, so hundreds of masked copies share one forward instead of one forward each (the plain loop).
Padding is masked out of attention, so a row's log-probabilities do not depend on its batch mates
(tests check batched == one at a time to 1e-5).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from biotf.model import Transformer


@dataclass
class Row:
    """`ids` go through the model; the distributions at `predict_at` are read at `targets` ((n, m) ids), or
    whole (n, vocab) when `targets` is None."""

    ids: np.ndarray
    predict_at: np.ndarray
    targets: np.ndarray | None = None


def row_log_probs(model: Transformer, rows: Sequence[Row], batch_tokens: int, pad_id: int,
                  progress=None) -> list[np.ndarray]:
    """Log-probabilities (float64) of every row, in the order of `rows`; `progress` (tqdm or None) counts
    predicted positions."""
    results: list[np.ndarray | None] = [None] * len(rows)
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i].ids))
    batch: list[int] = []
    for index in order:
        if batch and (len(batch) + 1) * len(rows[batch[0]].ids) > batch_tokens:
            _run(model, rows, batch, pad_id, results, progress)
            batch = []
        batch.append(index)
    if batch:
        _run(model, rows, batch, pad_id, results, progress)
    return results  # type: ignore[return-value]


def _run(model: Transformer, rows: Sequence[Row], batch: list[int], pad_id: int,
         results: list[np.ndarray | None], progress) -> None:
    longest = len(rows[batch[0]].ids)
    ids = np.full((len(batch), longest), pad_id, np.int64)
    mask = np.zeros((len(batch), longest), np.int64)
    for slot, index in enumerate(batch):
        ids[slot, :len(rows[index].ids)] = rows[index].ids
        mask[slot, :len(rows[index].ids)] = 1
    counts = [len(rows[index].predict_at) for index in batch]
    which = np.repeat(np.arange(len(batch)), counts)
    where = np.concatenate([rows[index].predict_at for index in batch])
    device = model.device
    with torch.inference_mode():
        attention_mask = None if mask.all() else torch.from_numpy(mask).to(device)
        logits = model(torch.from_numpy(ids).to(device), attention_mask=attention_mask).logits
        picked = torch.log_softmax(logits[torch.from_numpy(which).to(device), torch.from_numpy(where).to(device)]
                                   .float(), dim=-1).double().cpu().numpy()
    start = 0
    for index, count in zip(batch, counts):
        block = picked[start:start + count]
        targets = rows[index].targets
        results[index] = block if targets is None else np.take_along_axis(block, targets, axis=1)
        start += count
    if progress is not None:
        progress.update(len(where))
