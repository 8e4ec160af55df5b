"""ProteinGym's five zero-shot metrics of one assay (`proteingym/performance_DMS_benchmarks.py`), in numpy.

- Spearman: rank correlation of the model score with `DMS_score` (average ranks for ties, as scipy's `spearmanr`).
- AUC: area under the ROC curve of the model score against `DMS_score_bin` (1 = fit), ties counted half, as
  scikit-learn's `roc_auc_score`; NaN when the assay has one class only (ProteinGym records NaN there).
- MCC: Matthews correlation of `DMS_score_bin` with the model score binarised at its median (>= median: 1),
  as scikit-learn's `matthews_corrcoef` (0 when a margin of the table is empty).
- NDCG: gains are `DMS_score` min-max scaled to [0, 1]; the model's top k = floor(10% of the variants) ranks
  (rank 1 = highest score, ties ordered as `np.argsort` orders them, as ProteinGym) sum gain / log2(rank + 1), terms of
  gain 0 left out; divided by the same sum for the ideal ranking by `DMS_score`; 0 when no term is left.
- Top_recall: the share of the variants at or above the 90th percentile of `DMS_score` (numpy's linear
  interpolation) that are also at or above the 90th percentile of the model score; 0 when there are none.
Higher is fitter on both sides: a model score that says "more likely than the wild type" above 0 is used as is.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from biotf.errors import InputError
from biotf.ranks import average_ranks, spearman

METRICS = ("Spearman", "AUC", "MCC", "NDCG", "Top_recall")
TOP_PERCENT = 10  # ProteinGym's default for NDCG and top recall


def roc_auc(labels: np.ndarray, score: np.ndarray) -> float:
    """Mann-Whitney U over the positives' average ranks: scikit-learn's trapezoidal AUC, ties included."""
    positives = labels == 1
    n_pos, n_neg = int(positives.sum()), int((~positives).sum())
    if not n_pos or not n_neg:
        return float("nan")
    ranks = average_ranks(score)
    return float((ranks[positives].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def mcc(labels: np.ndarray, predicted: np.ndarray) -> float:
    tp = float(np.sum((labels == 1) & (predicted == 1)))
    tn = float(np.sum((labels == 0) & (predicted == 0)))
    fp = float(np.sum((labels == 0) & (predicted == 1)))
    fn = float(np.sum((labels == 1) & (predicted == 0)))
    denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def _dcg(ranks: np.ndarray, gains: np.ndarray, k: int) -> float:
    keep = (ranks <= k) & (gains != 0)
    return float(np.sum(gains[keep] / np.log2(ranks[keep] + 1)))


def ndcg(truth: np.ndarray, score: np.ndarray, top: float = TOP_PERCENT) -> float:
    k = int(np.floor(len(truth) * top / 100))
    gains = (truth - truth.min()) / (truth.max() - truth.min())
    found = _dcg(np.argsort(np.argsort(-score)) + 1, gains, k)
    if found == 0:  # no variant of gain > 0 among the model's top k
        return 0.0
    return found / _dcg(np.argsort(np.argsort(-gains)) + 1, gains, k)


def top_recall(truth: np.ndarray, score: np.ndarray, top: float = TOP_PERCENT) -> float:
    top_truth = truth >= np.percentile(truth, 100 - top)
    top_model = score >= np.percentile(score, 100 - top)
    return float((top_truth & top_model).sum() / top_truth.sum()) if top_truth.sum() else 0.0


def fitness_metrics(score: Sequence[float], dms_score: Sequence[float],
                    dms_score_bin: Sequence[float] | None = None, assay: str = "assay") -> dict[str, float]:
    """The five metrics of one assay (`METRICS`, ProteinGym's names); AUC and MCC are NaN without `dms_score_bin`.
    A missing or non-finite value is refused naming `assay`: ProteinGym scores every variant of an assay."""
    columns = {"score": score, "DMS_score": dms_score}
    if dms_score_bin is not None:
        columns["DMS_score_bin"] = dms_score_bin
    arrays = {}
    for name, values in columns.items():
        try:
            array = np.asarray(values, dtype=np.float64)
        except (TypeError, ValueError):
            raise InputError(f"{assay}: column {name} holds a value that is not a number") from None
        if not np.all(np.isfinite(array)):
            raise InputError(f"{assay}: column {name} has {int((~np.isfinite(array)).sum())} missing or non-finite "
                             "values (ProteinGym's metrics need one for every variant)")
        arrays[name] = array
    if len(arrays["score"]) < 2:
        raise InputError(f"{assay}: {len(arrays['score'])} variant(s); the metrics need at least 2")
    truth, model = arrays["DMS_score"], arrays["score"]
    result = {"Spearman": spearman(truth, model), "AUC": float("nan"), "MCC": float("nan"),
              "NDCG": ndcg(truth, model), "Top_recall": top_recall(truth, model)}
    if "DMS_score_bin" in arrays:
        labels = arrays["DMS_score_bin"]
        if not np.all(np.isin(labels, (0, 1))):
            raise InputError(f"{assay}: DMS_score_bin holds values other than 0 and 1")
        result["AUC"] = roc_auc(labels, model)
        result["MCC"] = mcc(labels, (model >= np.median(model)).astype(np.float64))
    return result
