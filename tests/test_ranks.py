"""`biotf.ranks`: ties and the rank correlation, against scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from biotf.ranks import average_ranks, spearman

scipy_stats = pytest.importorskip("scipy.stats")


def test_average_ranks_equal_scipys_with_ties():
    values = np.random.default_rng(0).integers(0, 6, size=200).astype(float)  # many ties
    assert np.array_equal(average_ranks(values), scipy_stats.rankdata(values, method="average"))


def test_spearman_equals_scipys_and_a_constant_side_gives_the_stated_value():
    rng = np.random.default_rng(1)
    truth, predicted = rng.normal(size=300), rng.integers(0, 10, size=300).astype(float)
    assert abs(spearman(truth, predicted) - scipy_stats.spearmanr(truth, predicted)[0]) <= 1e-12
    assert math.isnan(spearman(truth, np.ones(300))) and spearman(truth, np.ones(300), constant=0.0) == 0.0
