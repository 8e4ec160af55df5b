"""Task metrics in numpy, computed once over a whole split (never a mean of batch means).

classification / token: accuracy, macro F1 (each class's F1 averaged, so rare classes count as much as common
ones), Matthews correlation (the multiclass form of Gorodkin 2004, which sklearn's `matthews_corrcoef`
computes; 0 for a constant predictor). regression: RMSE, and Spearman's rank correlation (Pearson's on ranks,
ties given their average rank, as scipy.stats.spearmanr; 0 when either side is constant).
"""

from __future__ import annotations

import numpy as np

from biotf.ranks import spearman

LOWER_IS_BETTER = {"loss", "rmse"}


def confusion(truth: np.ndarray, predicted: np.ndarray, n_classes: int) -> np.ndarray:
    return np.bincount(truth * n_classes + predicted, minlength=n_classes * n_classes).reshape(n_classes, n_classes)


def classification_metrics(truth: np.ndarray, predicted: np.ndarray, n_classes: int) -> dict[str, float]:
    matrix = confusion(np.asarray(truth, np.int64), np.asarray(predicted, np.int64), n_classes).astype(np.float64)
    total = matrix.sum()
    correct = np.trace(matrix)
    true_per_class, predicted_per_class = matrix.sum(1), matrix.sum(0)
    present = (true_per_class + predicted_per_class) > 0  # classes absent from both sides have no F1
    f1 = 2 * np.diag(matrix)[present] / (true_per_class + predicted_per_class)[present]
    denominator = np.sqrt((total**2 - predicted_per_class @ predicted_per_class)
                          * (total**2 - true_per_class @ true_per_class))
    mcc = (correct * total - true_per_class @ predicted_per_class) / denominator if denominator > 0 else 0.0
    return {"accuracy": float(correct / max(total, 1)), "f1": float(f1.mean()) if len(f1) else 0.0,
            "mcc": float(mcc)}


def regression_metrics(truth: np.ndarray, predicted: np.ndarray) -> dict[str, float]:
    truth, predicted = np.asarray(truth, np.float64).ravel(), np.asarray(predicted, np.float64).ravel()
    rmse = float(np.sqrt(np.mean((truth - predicted) ** 2))) if len(truth) else float("nan")
    return {"rmse": rmse, "spearman": spearman(truth, predicted, constant=0.0)}


def task_metrics(task: str, truth: np.ndarray, predicted: np.ndarray, n_classes: int) -> dict[str, float]:
    """The metrics of `task`; token tasks pass only the labelled positions, flattened."""
    if task == "regression":
        return regression_metrics(truth, predicted)
    return classification_metrics(truth, predicted, n_classes)
