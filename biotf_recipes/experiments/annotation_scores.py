"""Scores of per-base genome annotation (`annotation_labels`'s classes): what a gene finder is judged by.

- per class, over bases: F1 of the calls (one class per base), and the area under the precision-recall curve of
  the method's per-base scores for that class, one class against the rest: average precision (sklearn's
  `average_precision_score`: sum over thresholds of (R_n - R_{n-1}) P_n, no interpolation);
- per gene: recall, a CDS counting as found when >= GENE_FOUND_FRACTION of its bases are called CDS on its strand
  (each base against its own part's strand: a trans-spliced gene has parts on both).

A class absent from the truth has no F1 or AUPRC (None, "n/a" in tables); so has a class the method does not
predict at all (Prodigal predicts no RNA), which would otherwise read as a score of 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from biotf_recipes.experiments.annotation_labels import ANNOTATION_CLASSES, Gene
from biotf.errors import InputError

GENE_FOUND_FRACTION = 0.8


@dataclass
class AnnotationScores:
    """Per-class F1 and AUPRC over `bases` bases (None: undefined, see the module docstring), and genes found."""

    f1: dict[str, float | None]
    auprc: dict[str, float | None]
    genes: int
    genes_found: int
    bases: int

    @property
    def gene_recall(self) -> float | None:
        return self.genes_found / self.genes if self.genes else None


def average_precision(truth: np.ndarray, scores: np.ndarray) -> float | None:
    """Average precision of `scores` ranking the True bases of `truth` first (None when none is True)."""
    from sklearn.metrics import average_precision_score

    truth = np.asarray(truth, bool)
    return float(average_precision_score(truth, scores)) if truth.any() else None


def genes_found(genes: Sequence[Gene], calls: np.ndarray, fraction: float = GENE_FOUND_FRACTION) -> int:
    """How many `genes` have >= `fraction` of their bases called their own CDS class."""
    return sum(bool(np.mean(calls[gene.positions] == gene.classes) >= fraction) for gene in genes)


def score_annotation(labels: np.ndarray, calls: np.ndarray, scores: np.ndarray | None, genes: Sequence[Gene],
                     predicted: Sequence[str] = ANNOTATION_CLASSES) -> AnnotationScores:
    """Scores of per-base `calls` (class ids) and `scores` ((bases, classes), higher = more likely; None: no scores)
    against `labels`. `predicted` names the classes the method can call; the others get None."""
    labels, calls = np.asarray(labels), np.asarray(calls)
    if calls.shape != labels.shape or (scores is not None and scores.shape != (len(labels), len(ANNOTATION_CLASSES))):
        raise InputError(f"{len(calls)} calls / scores {None if scores is None else scores.shape} for "
                         f"{len(labels)} labelled bases and {len(ANNOTATION_CLASSES)} classes")
    f1: dict[str, float | None] = {}
    auprc: dict[str, float | None] = {}
    for class_id, name in enumerate(ANNOTATION_CLASSES):
        truth, called = labels == class_id, calls == class_id
        if name not in predicted or not truth.any():
            f1[name] = auprc[name] = None
            continue
        true_positives = int((truth & called).sum())
        f1[name] = 2 * true_positives / (int(truth.sum()) + int(called.sum()))
        auprc[name] = None if scores is None else average_precision(truth, scores[:, class_id])
    return AnnotationScores(f1, auprc, len(genes), genes_found(genes, calls), len(labels))
