"""Probes: signal beats the trivial predictor, the baseline shares the folds, nothing is dropped silently."""

from __future__ import annotations

import numpy as np
import pytest

from biotf.analysis.probe_labels import labels
from biotf.analysis.probe import run_probe
from biotf.errors import InputError
from biotf.io.embeddings import EmbeddingTable

RESIDUES = np.array(list("ACDEFGHIKLMNPQRSTVWY"))


def data(n=120, seed=0):
    rng = np.random.default_rng(seed)
    classes = rng.integers(0, 3, n)
    signal = np.eye(3)[classes] * 3 + rng.normal(size=(n, 3))
    noise = rng.normal(size=(n, 8))
    sequences = np.array(["".join(rng.choice(RESIDUES, 30)) for _ in range(n)])
    return classes, {"embeddings": np.hstack([signal, noise]), "layer_0": noise}, sequences, np.array([f"p{i}" for i in range(n)])


def test_classification_table():
    classes, arrays, sequences, ids = data(90)
    report = run_probe(arrays, np.array([f"c{c}" for c in classes]), sequences, ids, "protein", folds=3)
    names = [row.name for row in report.rows]
    assert names == ["biotf embeddings", "biotf layer_0", "baseline: amino-acid composition + dipeptides",
                     "majority class"]
    scores = {row.name: row.scores.mean() for row in report.rows}
    assert report.metric == "accuracy" and report.n_classes == 3 and len(report.rows[0].scores) == 3
    assert scores["biotf embeddings"] > 0.85 > 0.6 > scores["biotf layer_0"]  # signal vs pure noise
    assert scores["majority class"] < 0.5
    assert "accuracy (mean ± sd over 3 folds)" in report.table()


def test_regression_uses_rmse():
    rng = np.random.default_rng(0)
    features = rng.normal(size=(100, 4))
    target = features @ np.array([1.0, -2.0, 0.5, 0.0]) + 0.1 * rng.normal(size=100)
    report = run_probe({"embeddings": features}, target.astype(str), np.array(["ACGT"] * 100),
                       np.arange(100).astype(str), "dna")
    rmse = {row.name: row.scores.mean() for row in report.rows}
    assert report.task == "regression" and report.metric == "RMSE"
    assert rmse["biotf embeddings"] < 0.2 < 1.0 < rmse["mean of training labels"]


def test_dropped_records_are_counted():
    classes, arrays, sequences, ids = data()
    values = np.array([f"c{c}" for c in classes], dtype="<U8")
    values[0] = ""  # unlabelled
    sequences[2], values[2] = sequences[1], values[1]  # an exact duplicate
    sequences[4], values[4] = sequences[3], values[3] + "x"  # duplicate sequence, other label: both go
    values[5:8] = "rare"  # a class too small for 5 folds
    report = run_probe(arrays, values, sequences, ids, None, deduplicate=True)
    assert report.dropped == {"unlabelled": 1, "duplicate sequence": 2, "duplicate with conflicting labels": 1,
                              "in classes with < 5 records (rare)": 3}
    assert report.n_records == 120 - 1 - 1 - 2 - 3
    assert [row.name for row in report.rows] == ["biotf embeddings", "biotf layer_0", "majority class"]


def test_label_errors():
    table = EmbeddingTable(np.array(["a", "b"]), np.array(["AC", "DE"]),
                           {"description": np.array(["Nucleus-S test", "Cytoplasm-U test"])}, {}, {})
    assert labels(table, "description", r"^(\S+?)-[MSU]\b").tolist() == ["Nucleus", "Cytoplasm"]
    with pytest.raises(InputError, match="label column 'location' not found.*columns: id, description"):
        labels(table, "location")
    with pytest.raises(InputError, match="record 'a'.*does not match"):
        labels(table, "description", r"^Membrane")
    classes, arrays, sequences, ids = data(20)
    with pytest.raises(InputError, match="record 'p0': label 'x' is not a number"):
        run_probe(arrays, np.array(["x"] * 20), sequences, ids, None, task="regression")


def test_a_given_split_replaces_the_folds():
    """Fitted on train + validation, scored on the test side alone (a fine-tuning run's split.tsv)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    classes, arrays, sequences, ids = data(90)
    values = np.array([f"c{c}" for c in classes])
    split = np.array(["train", "validation", "test"] * 30, dtype=object).astype(str)
    split[:3] = ""  # three records outside the split
    report = run_probe(arrays, values, sequences, ids, None, split=split)
    assert report.folds == 1 and report.dropped == {"not in the split": 3}
    assert all(len(row.scores) == 1 for row in report.rows)
    fit, test = split != "", split == "test"
    fit &= split != "test"
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, random_state=0))
    expected = np.mean(probe.fit(arrays["embeddings"][fit], values[fit]).predict(arrays["embeddings"][test])
                       == values[test])
    assert report.rows[0].scores[0] == pytest.approx(expected)
    assert "accuracy (on the test split)" in report.table()


def test_unparsable_smiles_refused_naming_the_option_or_left_out_of_every_row():
    pytest.importorskip("rdkit")
    rng = np.random.default_rng(0)
    sequences = np.array(["C" * (n % 7 + 1) + "O" for n in range(30)] + ["C1=CC=CN1(C)(C)"])
    classes = np.array([n % 2 for n in range(31)])
    arrays = {"embeddings": np.eye(2)[classes] * 3 + rng.normal(size=(31, 2))}
    ids = np.array([f"m{i}" for i in range(31)])
    with pytest.raises(InputError, match=r"\(record 'm30'\); set invalid_smiles=skip to leave such records out"):
        run_probe(arrays, classes.astype(str), sequences, ids, "smiles", folds=3)
    report = run_probe(arrays, classes.astype(str), sequences, ids, "smiles", folds=3, invalid_smiles="skip")
    assert report.n_records == 30 and report.unparsable == ["m30"]
    assert report.dropped == {"SMILES RDKit cannot parse (invalid_smiles='skip')": 1}
    assert [row.name for row in report.rows][1].startswith("baseline: Morgan")
