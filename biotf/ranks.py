"""Ranks with ties, the one implementation behind every rank correlation biotf reports (fine-tuning's Spearman,
ProteinGym's per-assay Spearman and NDCG ranks), so that the two cannot drift apart."""

from __future__ import annotations

import numpy as np


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks, ties given the mean of the ranks they span (scipy's `rankdata(method="average")`)."""
    order = np.argsort(values, kind="mergesort")
    ordered = values[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], len(values)]
    mean_rank = (starts + ends + 1) / 2.0
    ranks = np.empty(len(values))
    ranks[order] = np.repeat(mean_rank, ends - starts)
    return ranks


def spearman(truth: np.ndarray, predicted: np.ndarray, constant: float = float("nan")) -> float:
    """Spearman's rank correlation (Pearson's on `average_ranks`, as scipy.stats.spearmanr); `constant` where either
    side is constant, for which it is undefined (scipy: nan; fine-tuning reports 0, a constant predictor's worth)."""
    a, b = average_ranks(np.asarray(truth, np.float64)), average_ranks(np.asarray(predicted, np.float64))
    a, b = a - a.mean(), b - b.mean()
    scale = np.sqrt((a @ a) * (b @ b))
    return float(a @ b / scale) if scale > 0 else constant
