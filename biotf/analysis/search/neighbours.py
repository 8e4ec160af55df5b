"""Exact k-nearest-neighbour search: a blocked matrix product with a running top-k, in bounded memory.

    scores, rows = exact_search(base, queries, k=10, metric="cosine")

Scores, per metric (the value written to a hits file):
- cosine: cosine similarity, higher is nearer (rows are scaled to unit length first: `prepare`);
- l2: Euclidean distance, lower is nearer (from |q|^2 - 2 q.x + |x|^2, clipped at 0);
- jaccard: |a & b| / |a | b| of 0/1 rows (set similarity: Tanimoto of fingerprint bits, Jaccard of k-mer sets),
  higher is nearer; two empty sets score 0.

Queries are taken `query_block` at a time against `base_block` rows of the base at a time, so the score matrix
held is query_block x base_block floats whatever the sizes (64 MiB by default). Ties are broken by the lower base
row (the earlier record), the same in every block order: within a block all candidates tied at the k-th score
are kept, so the merged top-k never depends on where the blocks fall. `exclude` names base rows a query must not
return (leave-one-out evaluation leaves out the query itself; an id query its own record).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from biotf.analysis.search import METRICS
from biotf.chemistry import tanimoto
from biotf.errors import ConfigError, InputError
from biotf.naming import given, parameter

QUERY_BLOCK, BASE_BLOCK = 1024, 16384


def unit_rows(vectors: np.ndarray, ids: Sequence[str] | None = None, what: str = "vector") -> np.ndarray:
    """Rows scaled to unit length (float32, a new array); a zero or non-finite row is refused naming its id."""
    vectors = np.asarray(vectors, np.float32)
    norms = np.linalg.norm(vectors, axis=1)
    bad = np.flatnonzero(~np.isfinite(norms) | (norms == 0))
    if len(bad):
        name = repr(str(ids[bad[0]])) if ids is not None else f"row {bad[0]}"
        raise InputError(f"{what} {name} is {'zero' if norms[bad[0]] == 0 else 'not finite'}: cosine similarity "
                         f"is undefined ({len(bad)} such row(s); use {given('metric', 'l2')} or leave them out)")
    return vectors / norms[:, None]


def prepare(vectors: np.ndarray, metric: str, ids: Sequence[str] | None = None, what: str = "vector") -> np.ndarray:
    """The rows `exact_search` compares for `metric`: unit rows (cosine), finite float32 rows (l2), 0/1 rows
    (jaccard)."""
    if metric == "cosine":
        return unit_rows(vectors, ids, what)
    if metric == "jaccard":
        return (np.asarray(vectors) != 0).astype(np.float32)
    if metric != "l2":
        raise ConfigError(parameter("metric"), metric, allowed=" | ".join(METRICS))
    vectors = np.asarray(vectors, np.float32)
    bad = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
    if len(bad):
        name = repr(str(ids[bad[0]])) if ids is not None else f"row {bad[0]}"
        raise InputError(f"{what} {name} is not finite ({len(bad)} such row(s))")
    return vectors


def _block_scores(queries: np.ndarray, base: np.ndarray, metric: str, base_sums: np.ndarray) -> np.ndarray:
    """(len(queries), len(base)) scores where higher is nearer: similarity, or -(|x|^2 - 2 q.x) for l2 (the
    query's own |q|^2 is added at the end, it does not change the order)."""
    product = queries @ base.T
    if metric == "cosine":
        return product
    if metric == "l2":
        product *= 2
        product -= base_sums[None, :]
        return product
    return tanimoto(product, queries.sum(axis=1), base_sums, empty=0.0)


def _block_top(scores: np.ndarray, offset: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each row's k best of one block, as (scores, base rows), both (rows, k), in no particular order; of candidates
    tied at the k-th score the lowest columns are kept (rows with such a tie are redone exactly)."""
    width = scores.shape[1]
    k = min(k, width)
    columns = np.argpartition(scores, width - k, axis=1)[:, width - k:]
    top = np.take_along_axis(scores, columns, 1)
    kth = top.min(axis=1, keepdims=True)
    tied = (scores == kth).sum(axis=1) > (top == kth).sum(axis=1)  # a tie at the k-th score left candidates out
    for row in np.flatnonzero(tied):
        above = np.flatnonzero(scores[row] > kth[row])
        level = np.flatnonzero(scores[row] == kth[row])[:k - len(above)]
        columns[row] = np.concatenate([above, level])
        top[row] = scores[row, columns[row]]
    return top, columns + offset


def _merge(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((rows, -scores), axis=1)[:, :k]
    return np.take_along_axis(scores, order, 1), np.take_along_axis(rows, order, 1)


def exact_search(base: np.ndarray, queries: np.ndarray, k: int, metric: str,
                 exclude: Sequence[Sequence[int]] | None = None, query_block: int = QUERY_BLOCK,
                 base_block: int = BASE_BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """The k nearest base rows of every query, nearest first: (scores, rows), each (len(queries), k). Both arrays
    come from `prepare` with the same metric. A query with fewer than k rows left (a small base, `exclude`) has
    rows -1 and scores NaN after its last neighbour."""
    if k < 1:
        raise ConfigError("-k", k, allowed="an integer >= 1")
    base_sums = (base * base).sum(axis=1) if metric == "l2" else base.sum(axis=1) if metric == "jaccard" else None
    n_queries = len(queries)
    out_scores = np.full((n_queries, k), np.nan, np.float32)
    out_rows = np.full((n_queries, k), -1, np.int64)
    for start in range(0, n_queries, query_block):
        block = np.asarray(queries[start:start + query_block], np.float32)
        best_scores = np.full((len(block), 0), -np.inf, np.float32)
        best_rows = np.zeros((len(block), 0), np.int64)
        for offset in range(0, len(base), base_block):
            scores = _block_scores(block, base[offset:offset + base_block], metric,
                                   None if base_sums is None else base_sums[offset:offset + base_block])
            if exclude is not None:
                for row, rows in enumerate(exclude[start:start + len(block)]):
                    inside = [r - offset for r in rows if offset <= r < offset + scores.shape[1]]
                    scores[row, inside] = -np.inf
            top_scores, top_rows = _block_top(scores, offset, k)
            best_scores, best_rows = _merge(np.hstack([best_scores, top_scores]), np.hstack([best_rows, top_rows]), k)
        found = np.isfinite(best_scores)
        if metric == "l2":
            squared = (block * block).sum(axis=1, keepdims=True) - best_scores
            best_scores = np.sqrt(np.maximum(squared, 0))
        width = best_scores.shape[1]
        out_scores[start:start + len(block), :width] = np.where(found, best_scores, np.nan)
        out_rows[start:start + len(block), :width] = np.where(found, best_rows, -1)
    return out_scores, out_rows
