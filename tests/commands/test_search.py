"""`biotf search` through the real CLI: a sequence query embeds as `biotf embed` did and finds the record itself;
another model, or an index of embeddings without a model fingerprint, is refused in one line; id and expression
queries; hits in query order; evaluate prints both rows."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

from biotf.cli import main

pytest.importorskip("faiss")


@pytest.fixture(scope="module")
def setup(pretrained, tmp_path_factory):
    """The tiny protein model of `pretrained`, another with other weights, and embeddings of 60 records."""
    from biotf.checkpoint import save_pretrained
    from biotf.model import Transformer, TransformerConfig
    from biotf.tokenizers import build_tokenizer

    root = tmp_path_factory.mktemp("search")
    tokenizer = build_tokenizer({"kind": "protein"})
    torch.manual_seed(1)
    save_pretrained(Transformer(TransformerConfig.preset("tiny", causal=False, vocab_size=tokenizer.vocab_size)),
                    tokenizer, root / "other")
    lines = (pretrained / "labelled.csv").read_text().splitlines()
    (root / "records.csv").write_text("\n".join(lines[:61]) + "\n")
    (root / "queries.csv").write_text("\n".join([lines[0], lines[8], lines[3]]) + "\n")  # p7, p2
    assert main(["embed", "--model", str(pretrained / "base"), "--input", str(root / "records.csv"),
                 "--output", str(root / "e.npz"), "--no-progress"]) == 0
    assert main(["search", "build", "--embeddings", str(root / "e.npz"), "--output", str(root / "ix")]) == 0
    return pretrained / "base", root


def read_hits(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def test_sequence_queries_find_their_own_record_first_in_query_order(setup, tmp_path):
    model, root = setup
    out = tmp_path / "hits.tsv"
    assert main(["search", "query", "--index", str(root / "ix"), "--input", str(root / "queries.csv"),
                 "--model", str(model), "-k", "3", "--output", str(out)]) == 0
    rows = read_hits(out)
    assert [(r["query"], r["rank"]) for r in rows] == [("p7", "1"), ("p7", "2"), ("p7", "3"),
                                                       ("p2", "1"), ("p2", "2"), ("p2", "3")]
    assert rows[0]["id"] == "p7" and rows[3]["id"] == "p2"
    assert float(rows[0]["score"]) == pytest.approx(1.0, abs=1e-5)  # the same vector as in the index


def test_another_model_is_refused_in_one_line(setup, tmp_path, capsys):
    _, root = setup
    status = main(["search", "query", "--index", str(root / "ix"), "--input", str(root / "queries.csv"),
                   "--model", str(root / "other"), "--output", str(tmp_path / "hits.tsv")])
    error = capsys.readouterr().err.strip()
    assert status == 2 and "\n" not in error
    assert "its model fingerprint" in error and "differs from the index's" in error
    assert not (tmp_path / "hits.tsv").exists()


def test_an_index_embedded_in_another_precision_is_queried_in_it(setup, tmp_path, capsys):
    """Embeddings computed in bf16 (`embed --precision bf16`) are queried by the model loaded as they were made:
    `--precision bf16` finds each record itself; without it the query is refused naming the flag to give."""
    model, root = setup
    assert main(["embed", "--model", str(model), "--input", str(root / "records.csv"), "--output",
                 str(tmp_path / "e.npz"), "--precision", "bf16", "--no-progress"]) == 0
    assert main(["search", "build", "--embeddings", str(tmp_path / "e.npz"), "--output", str(tmp_path / "ix")]) == 0
    query = ["search", "query", "--index", str(tmp_path / "ix"), "--input", str(root / "queries.csv"),
             "--model", str(model), "-k", "1"]
    capsys.readouterr()
    assert main([*query, "--output", str(tmp_path / "fp32.tsv")]) == 2
    error = capsys.readouterr().err.strip()
    assert "\n" not in error and "computed in bf16, the queries would be computed in fp32" in error
    assert "(--precision bf16)" in error and not (tmp_path / "fp32.tsv").exists()
    assert main([*query, "--precision", "bf16", "--output", str(tmp_path / "hits.tsv")]) == 0
    rows = read_hits(tmp_path / "hits.tsv")
    assert [(row["query"], row["id"]) for row in rows] == [("p7", "p7"), ("p2", "p2")]
    assert float(rows[0]["score"]) == pytest.approx(1.0, abs=1e-5)


def test_an_index_of_embeddings_without_a_model_fingerprint_says_why(setup, tmp_path, capsys):
    model, root = setup
    meta = json.loads((root / "ix" / "index.json").read_text())
    old = tmp_path / "old"
    old.mkdir()
    for name in meta["crc32"]:
        (old / name).write_bytes((root / "ix" / name).read_bytes())
    del meta["embedding_info"]["model_fingerprint"]  # as an index of a file from before the fingerprint
    (old / "index.json").write_text(json.dumps(meta))
    status = main(["search", "query", "--index", str(old), "--input", str(root / "queries.csv"), "--model",
                   str(model), "--output", str(tmp_path / "hits.tsv")])
    assert status == 2 and "without a model fingerprint (written by an older biotf embed)" in capsys.readouterr().err
    assert main(["search", "query", "--index", str(old), "--ids", "p1", "--output", str(tmp_path / "ok.tsv")]) == 0


def test_id_and_expression_queries_leave_their_own_ids_out(setup, tmp_path, capsys):
    _, root = setup
    out = tmp_path / "hits.parquet"
    assert main(["search", "query", "--index", str(root / "ix"), "--ids", "p3", "p1", "-k", "59",
                 "--output", str(out), "--metric", "l2"]) == 0
    import pyarrow.parquet as pq

    table = pq.read_table(out).to_pydict()
    assert table["query"] == ["p3"] * 59 + ["p1"] * 59
    assert "p3" not in table["id"][:59] and "p1" not in table["id"][59:]
    assert np.all(np.diff(table["score"][:59]) >= 0)  # distances ascend
    assert main(["search", "query", "--index", str(root / "ix"), "--expression", "p1 - p2 + p3", "-k", "5",
                 "--output", str(tmp_path / "x.tsv")]) == 0
    assert not {"p1", "p2", "p3"} & {r["id"] for r in read_hits(tmp_path / "x.tsv")}
    status = main(["search", "query", "--index", str(root / "ix"), "--expression", "p1 - nope",
                   "--output", str(tmp_path / "y.tsv")])
    assert status == 2 and "unknown id 'nope'" in capsys.readouterr().err
    status = main(["search", "query", "--index", str(root / "ix"), "--ids", "p1", "--expression", "p2",
                   "--output", str(tmp_path / "z.tsv")])
    assert status == 2 and "give exactly one query form" in capsys.readouterr().err


def test_evaluate_prints_the_embeddings_and_the_kmer_rows(setup, capsys):
    _, root = setup
    assert main(["search", "evaluate", "--embeddings", str(root / "e.npz"), "--label", "label", "-k", "1", "5"]) == 0
    out = capsys.readouterr().out
    assert "leave-one-out: 59 queries" in out and "left out of every row: 1 records without a label" in out
    assert "biotf embeddings, mean pool, cosine" in out and "k-mer identity (Jaccard of 3-mer sets)" in out


@pytest.mark.parametrize("suffix", [".tsv", ".csv", ".parquet"])
def test_a_query_without_hits_writes_a_table_with_its_columns(tmp_path, capsys, suffix):
    """An id query of a one-record index leaves its own record out: no hits, but a table every reader opens."""
    import pandas as pd

    from biotf.analysis.search.index import build_from_arrays

    build_from_arrays(tmp_path / "ix", np.ones((1, 4), np.float32), ["only"], {})
    out = tmp_path / f"hits{suffix}"
    assert main(["search", "query", "--index", str(tmp_path / "ix"), "--ids", "only", "--output", str(out)]) == 0
    assert "0 hits" in capsys.readouterr().err
    table = pd.read_parquet(out) if suffix == ".parquet" else pd.read_csv(out, sep="\t" if suffix == ".tsv" else ",")
    assert list(table.columns) == ["query", "rank", "id", "score"] and len(table) == 0
