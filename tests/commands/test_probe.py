"""`biotf probe` through the real CLI: the side-by-side table, left-out counts, one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from biotf.cli import main
from biotf.io.readers import Record
from biotf.io.embeddings import EmbeddingWriter, RecordEmbedding


@pytest.fixture(scope="module")
def embeddings(tmp_path_factory):
    """60 'proteins' whose embeddings carry their class; two records share a sequence."""
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("probe") / "e.parquet"
    with EmbeddingWriter(path, ["embeddings"], False, {"pool": "mean", "tokenizer": "protein"}) as writer:
        for i in range(60):
            label = ["Nucleus", "Cytoplasm"][i % 2]
            sequence = "MKV" if i < 2 else "".join(rng.choice(list("ACDEFGHIKLMNPQRSTVWY"), 20))
            vector = np.r_[3.0 * (i % 2), rng.normal(size=3)].astype(np.float32)[None]
            writer.add(RecordEmbedding(Record(f"P{i}", sequence, {"description": f"{label}-S test"}, i), vector))
        writer.close()
    return path


def test_table_with_baseline(capsys, embeddings):
    status = main(["probe", "--embeddings", str(embeddings), "--label", "description",
                   "--label-pattern", r"^(\S+?)-[MSU]\b", "--deduplicate", "--folds", "3"])
    out = capsys.readouterr().out
    assert status == 0
    assert "58 records, label description ~ ^(\\S+?)-[MSU]\\b, 2 classes; logistic regression, 3-fold CV" in out
    assert "left out: 1 duplicate sequence, 1 duplicate with conflicting labels" in out
    lines = {line.split("  ")[0]: line for line in out.splitlines()}
    assert float(lines["model (mean pool) embeddings"].split()[-3]) == 1.0
    assert "baseline: amino-acid composition + dipeptides" in lines and "majority class" in lines


def test_missing_label_column_is_one_line(capsys, embeddings, tmp_path):
    status = main(["probe", "--embeddings", str(embeddings), "--label", "location"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1
    assert "label column 'location' not found in the embedding file (columns: id, description)" in err
    status = main(["probe", "--embeddings", str(tmp_path / "missing.h5ad"), "--label", "x"])
    assert status == 2 and "missing.h5ad does not exist" in capsys.readouterr().err
