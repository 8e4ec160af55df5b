"""ProteinGym's five metrics (`biotf.scoring.fitness_metrics`) against scipy / scikit-learn and a literal transcription of
ProteinGym's NDCG and top-recall formulas, on the shipped ProteinGym assay (BLAT_ECOLX_Jacquier_2013)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from biotf.errors import InputError
from biotf.scoring import make_variant, parse_code, substitution_score
from biotf.scoring.fitness_metrics import fitness_metrics

ASSAY = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "proteins" / "proteingym" / \
    "BLAT_ECOLX_Jacquier_2013.csv.gz"
WILD_TYPE = ASSAY.parent / "BLAT_ECOLX_wt.fasta"


def reference_ndcg(truth: np.ndarray, score: np.ndarray) -> float:
    """performance_DMS_benchmarks.calc_ndcg with quantile=True, top=10, term by term."""
    k = int(np.floor(len(truth) * 0.1))
    gains = (truth - truth.min()) / (truth.max() - truth.min())

    def dcg(ranks):
        return sum(g / np.log2(r + 1) for r, g in zip(ranks, gains) if r <= k and g != 0)

    found = dcg(np.argsort(np.argsort(-score)) + 1)
    return 0.0 if found == 0 else found / dcg(np.argsort(np.argsort(-gains)) + 1)


def reference_top_recall(truth: np.ndarray, score: np.ndarray) -> float:
    top_truth = truth >= np.percentile(truth, 90)
    top_model = score >= np.percentile(score, 90)
    return (top_truth & top_model).sum() / top_truth.sum()


@pytest.fixture(scope="module")
def assay():
    pandas = pytest.importorskip("pandas")
    if not ASSAY.is_file():
        pytest.skip(f"{ASSAY} is not here")
    table = pandas.read_csv(ASSAY)
    wild_type = "".join(WILD_TYPE.read_text().splitlines()[1:])
    table["blosum"] = [substitution_score(make_variant(wild_type, parse_code(code), code)) for code in table.mutant]
    return table


@pytest.mark.parametrize("column", ["blosum", "random"])
def test_the_five_metrics_equal_scipy_sklearn_and_proteingym_formulas(assay, column):
    """BLOSUM62 scores have many ties (they test average ranks, the median cut and argsort's order); random ones
    none."""
    scipy_stats = pytest.importorskip("scipy.stats")
    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    truth, labels = assay.DMS_score.to_numpy(), assay.DMS_score_bin.to_numpy()
    score = assay.blosum.to_numpy() if column == "blosum" else np.random.default_rng(0).normal(size=len(assay))
    ours = fitness_metrics(score, truth, labels)
    assert len(assay) == 989 and set(labels) == {0, 1}
    assert abs(ours["Spearman"] - scipy_stats.spearmanr(truth, score)[0]) <= 1e-12
    assert abs(ours["AUC"] - sklearn_metrics.roc_auc_score(labels, score)) <= 1e-12
    binary = (score >= np.median(score)).astype(int)
    assert abs(ours["MCC"] - sklearn_metrics.matthews_corrcoef(labels, binary)) <= 1e-12
    assert abs(ours["NDCG"] - reference_ndcg(truth, score)) <= 1e-12
    assert abs(ours["Top_recall"] - reference_top_recall(truth, score)) <= 1e-12
    if column == "blosum":  # BLOSUM62 ranks TEM-1's variants better than chance (ProteinGym: Spearman 0.2-0.4)
        assert 0.2 < ours["Spearman"] < 0.5 and ours["AUC"] > 0.6


def test_edge_cases_as_proteingym_records_them():
    one_class = fitness_metrics([0.1, 0.2, 0.3], [1.0, 2.0, 3.0], [1, 1, 1])
    assert np.isnan(one_class["AUC"]) and one_class["MCC"] == 0.0  # ProteinGym: NaN; sklearn's MCC: 0
    no_bins = fitness_metrics([0.1, 0.2, 0.3], [1.0, 2.0, 3.0])
    assert np.isnan(no_bins["AUC"]) and np.isnan(no_bins["MCC"]) and no_bins["Spearman"] == pytest.approx(1.0)
    with pytest.raises(InputError, match="BLAT: column DMS_score has 1 missing"):
        fitness_metrics([0.1, 0.2], [1.0, float("nan")], assay="BLAT")
    with pytest.raises(InputError, match="DMS_score_bin holds values other than 0 and 1"):
        fitness_metrics([0.1, 0.2], [1.0, 2.0], [0, 2])
