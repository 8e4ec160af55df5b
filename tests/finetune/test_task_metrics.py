"""Task metrics against scikit-learn and SciPy, the references whose definitions they follow."""

from __future__ import annotations

import numpy as np
import pytest

from biotf.finetune.task_metrics import classification_metrics, regression_metrics


@pytest.mark.parametrize("n_classes", [2, 5])
def test_classification_metrics_equal_sklearn(n_classes):
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(n_classes)
    truth = rng.integers(0, n_classes, 300)
    predicted = np.where(rng.random(300) < 0.6, truth, rng.integers(0, n_classes, 300))
    ours = classification_metrics(truth, predicted, n_classes)
    assert ours["accuracy"] == pytest.approx(metrics.accuracy_score(truth, predicted), abs=1e-12)
    assert ours["f1"] == pytest.approx(metrics.f1_score(truth, predicted, average="macro"), abs=1e-12)
    assert ours["mcc"] == pytest.approx(metrics.matthews_corrcoef(truth, predicted), abs=1e-12)
    assert classification_metrics(truth, np.zeros_like(truth), n_classes)["mcc"] == 0.0  # constant predictor


def test_regression_metrics_equal_scipy_with_ties():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    truth = rng.integers(0, 8, 200).astype(float)  # many ties
    predicted = truth + rng.normal(0, 2, 200)
    predicted[:50] = np.round(predicted[:50])
    ours = regression_metrics(truth, predicted)
    assert ours["spearman"] == pytest.approx(stats.spearmanr(truth, predicted).statistic, abs=1e-12)
    assert ours["rmse"] == pytest.approx(float(np.sqrt(np.mean((truth - predicted) ** 2))), abs=1e-12)
    assert regression_metrics(truth, np.ones_like(truth))["spearman"] == 0.0
