"""Similarity search: exact search is brute force (both metrics, ties to the earlier record, any block sizes), the
approximate index finds the true neighbours, grows without a rebuild, and refuses damage and duplicate ids; the
expression parser is strict; kNN agreement, Tanimoto and k-mer Jaccard equal hand-computed values."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from biotf.analysis.search.classical import classical_sets
from biotf.analysis.search.agreement import agreement, knn_agreement
from biotf.analysis.search.expression import parse_expression
from biotf.analysis.search.index import SearchIndex, add_records, build_index
from biotf.analysis.search.neighbours import exact_search, prepare
from biotf.errors import ConfigError, InputError
from biotf.io.embeddings import EmbeddingWriter, RecordEmbedding
from biotf.io.readers import Record

faiss = pytest.importorskip("faiss")


@pytest.fixture(autouse=True)
def one_faiss_thread():
    """faiss's OpenMP threads spin-wait: on a shared machine one thread is faster for these small indexes."""
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(threads)


def brute_force(base: np.ndarray, queries: np.ndarray, k: int, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """float64 scores of every pair, sorted by (score, then the lower row) per query."""
    base, queries = base.astype(np.float64), queries.astype(np.float64)
    if metric == "cosine":
        base = base / np.linalg.norm(base, axis=1, keepdims=True)
        queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
        scores = queries @ base.T
        keys = -scores
    else:
        scores = np.sqrt(((queries[:, None, :] - base[None, :, :]) ** 2).sum(-1))
        keys = scores
    rows = np.array([np.lexsort((np.arange(len(base)), key))[:k] for key in keys])
    return np.take_along_axis(scores, rows, 1), rows


def tied_vectors(n: int, seed: int) -> np.ndarray:
    """Rows of four entries +-1 (the rest 0), many repeated: every dot product and norm is exact in float32 (unit
    rows have entries +-0.5), so tied scores are exactly equal on both sides."""
    rng = np.random.default_rng(seed)
    rows = np.zeros((n, 8), np.float32)
    for row in rows:
        row[rng.choice(8, 4, replace=False)] = rng.choice([-1.0, 1.0], 4)
    return rows


@pytest.mark.parametrize("metric", ["cosine", "l2"])
@pytest.mark.parametrize("blocks", [(1024, 16384), (3, 7), (5, 1)])
def test_exact_search_equals_brute_force_with_ties_to_the_earlier_row(metric, blocks):
    base, queries = tied_vectors(200, 0), tied_vectors(23, 1)  # 200 rows from 1,120 patterns: many exact ties
    scores, rows = exact_search(prepare(base, metric), prepare(queries, metric), 12, metric,
                                query_block=blocks[0], base_block=blocks[1])
    expected_scores, expected_rows = brute_force(base, queries, 12, metric)
    np.testing.assert_array_equal(rows, expected_rows)
    np.testing.assert_allclose(scores, expected_scores, atol=1e-6)
    assert len(np.unique(base, axis=0)) < len(base)  # the ties are really there


def test_exact_search_on_real_valued_vectors_and_fewer_rows_than_k():
    rng = np.random.default_rng(3)
    base, queries = rng.normal(size=(300, 16)).astype(np.float32), rng.normal(size=(9, 16)).astype(np.float32)
    for metric in ("cosine", "l2"):
        scores, rows = exact_search(prepare(base, metric), prepare(queries, metric), 5, metric, base_block=64)
        expected_scores, expected_rows = brute_force(base, queries, 5, metric)
        np.testing.assert_array_equal(rows, expected_rows)
        np.testing.assert_allclose(scores, expected_scores, rtol=1e-5, atol=1e-5)
    scores, rows = exact_search(prepare(base[:3], "l2"), prepare(queries[:1], "l2"), 5, "l2", exclude=[[1]])
    assert rows.tolist() == [[*brute_force(base[[0, 2]], queries[:1], 2, "l2")[1][0] * 2, -1, -1, -1]]
    assert np.isnan(scores[0, 2:]).all()


def test_zero_vectors_are_refused_for_cosine_naming_the_record():
    with pytest.raises(InputError, match="embedding 'b' is zero"):
        prepare(np.array([[1, 0], [0, 0]], np.float32), "cosine", ["a", "b"], "embedding")


def clustered(n: int, seed: int, dim: int = 32) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(0).normal(size=(20, dim))
    return (centres[rng.integers(0, 20, n)] + 0.3 * rng.normal(size=(n, dim))).astype(np.float32)


def write_embeddings(path, vectors, ids, info=None):
    info = {"tokenizer": "protein", "pool": "mean", "layers": [2], "dim": vectors.shape[1],
            "model_fingerprint": "m", "tokenizer_fingerprint": "t", **(info or {})}
    with EmbeddingWriter(path, ["embeddings"], False, info) as writer:
        for position, (name, vector) in enumerate(zip(ids, vectors)):
            writer.add(RecordEmbedding(Record(name, "ACDE", {}, position), vector[None]))
        writer.close()
    return path


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / truth.shape[1] for a, b in zip(found, truth)]))


def test_approximate_index_recall_on_a_clustered_set(tmp_path):
    base, queries = clustered(3000, 1), clustered(100, 2)
    build_index(write_embeddings(tmp_path / "e.npz", base, [f"r{i}" for i in range(3000)]), tmp_path / "ix", "approx")
    index = SearchIndex.open(tmp_path / "ix")
    _, found = index.search(queries, 10, "cosine")
    _, truth = exact_search(prepare(base, "cosine"), prepare(queries, "cosine"), 10, "cosine")
    assert recall(found, truth) >= 0.95
    _, found = index.search(queries, 10, "cosine", ef_search=400)  # a wider search is at least as good
    assert recall(found, truth) >= 0.99


def test_a_killed_add_leaves_the_index_as_it_was_and_the_next_add_leaves_only_what_index_json_names(tmp_path, monkeypatch):
    from biotf.analysis.search import index as index_module

    vectors = clustered(80, 4)
    files = [write_embeddings(tmp_path / f"{n}.npz", vectors[start:stop], [f"r{i}" for i in range(start, stop)])
             for n, (start, stop) in enumerate([(0, 30), (30, 60), (60, 80)])]
    build_index(files[0], tmp_path / "ix", "approx")
    before = {p.name: p.read_bytes() for p in (tmp_path / "ix").iterdir()}
    commit = index_module._commit

    def killed(directory, meta):
        raise KeyboardInterrupt  # the process dies between writing the shard and index.json

    monkeypatch.setattr(index_module, "_commit", killed)
    with pytest.raises(KeyboardInterrupt):
        add_records(tmp_path / "ix", files[1])
    left = {p.name for p in (tmp_path / "ix").iterdir()} - set(before)
    assert left == {"vectors-1.npy", "ids-1.json", "approx-60.faiss"}  # written, not named by index.json
    assert SearchIndex.open(tmp_path / "ix").ids == [f"r{i}" for i in range(30)]  # the index as it was
    monkeypatch.setattr(index_module, "_commit", commit)
    meta, added = add_records(tmp_path / "ix", files[2])
    assert added == 20 and meta["records"] == 50
    # the killed add's shard is overwritten by this one's (same number), its approximate index removed
    assert sorted(p.name for p in (tmp_path / "ix").iterdir()) == sorted(["index.json", *meta["crc32"]])
    assert SearchIndex.open(tmp_path / "ix").ids == [f"r{i}" for i in range(30)] + [f"r{i}" for i in range(60, 80)]


def test_add_grows_the_approximate_index_without_rebuilding_and_keeps_ids_unique(tmp_path, monkeypatch):
    vectors = clustered(1200, 3)
    first = write_embeddings(tmp_path / "a.npz", vectors[:800], [f"r{i}" for i in range(800)])
    second = write_embeddings(tmp_path / "b.parquet", vectors[800:], [f"r{i}" for i in range(800, 1200)])
    build_index(first, tmp_path / "ix", "approx")
    monkeypatch.setattr(faiss, "IndexHNSWFlat", None)  # a rebuild would construct a new graph: it must not
    meta, added = add_records(tmp_path / "ix", second)
    assert added == 400 and meta["records"] == 1200 and len(meta["shards"]) == 2
    assert sorted(p.name for p in (tmp_path / "ix").glob("approx-*")) == ["approx-1200.faiss"]
    index = SearchIndex.open(tmp_path / "ix")
    assert index.approx.ntotal == 1200 and index.ids[800] == "r800"
    _, found = index.search(vectors[800:900], 1, "cosine")
    assert (found[:, 0] == np.arange(800, 900)).mean() >= 0.95  # the added records are found (themselves)
    with pytest.raises(InputError, match="id 'r800' is already in the index"):
        add_records(tmp_path / "ix", second)
    other = write_embeddings(tmp_path / "c.npz", vectors[:2], ["x", "y"], {"model_fingerprint": "other"})
    with pytest.raises(InputError, match="model_fingerprint 'other' differs from the index's 'm'"):
        add_records(tmp_path / "ix", other)
    assert SearchIndex.open(tmp_path / "ix").meta["records"] == 1200  # refused adds left it as it was


def test_duplicate_ids_damage_and_old_files(tmp_path):
    vectors = clustered(10, 4)
    twice = write_embeddings(tmp_path / "d.npz", vectors, [f"r{i % 9}" for i in range(10)])
    with pytest.raises(InputError, match="id 'r0' appears twice"):
        build_index(twice, tmp_path / "d")
    build_index(write_embeddings(tmp_path / "e.npz", vectors, [f"r{i}" for i in range(10)]), tmp_path / "ix")
    shard = tmp_path / "ix" / "vectors-0.npy"
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(InputError, match="vectors-0.npy is damaged"):
        SearchIndex.open(tmp_path / "ix")
    with pytest.raises(InputError, match="not a search index"):
        SearchIndex.open(tmp_path)


@pytest.mark.parametrize("text, terms", [
    ("a - b + c", [(1, "a"), (-1, "b"), (1, "c")]),
    ("- a + b", [(-1, "a"), (1, "b")]),
    ("sp|P1-2|X + 'my id'", [(1, "sp|P1-2|X"), (1, "my id")]),
    ("a", [(1, "a")]),
])
def test_expressions_parse(text, terms):
    assert parse_expression(text) == terms


@pytest.mark.parametrize("text, reason", [
    ("", "empty"), ("a b", "'b' follows an id without an operator"), ("a - - b", "two operators in a row at word 3"),
    ("a +", "ends with an operator"), ("-", "an operator with no id"), ("a + 'b", "no closing quotation"),
])
def test_bad_expressions_are_one_line_errors(text, reason):
    with pytest.raises(InputError, match=reason):
        parse_expression(text)


def test_agreement_against_a_hand_computed_case():
    # 4 queries, neighbours (nearest first) among references labelled x x y y z
    reference_labels = np.array(["x", "x", "y", "y", "z"])
    query_labels = np.array(["x", "y", "y", "z"])
    neighbours = np.array([[0, 2, 1], [0, 2, 3], [4, 0, 1], [4, 2, 3]])
    precision, accuracy = agreement(neighbours, query_labels, reference_labels, [1, 3])
    # P@1: x=x, y!=x, y!=z, z=z -> 2/4; P@3: 2/3, 2/3, 0, 1/3 -> 5/12
    assert precision == pytest.approx({1: 0.5, 3: 5 / 12})
    # votes@3: [x x y] -> x ok; [x y y] -> y ok; [z x x] -> x wrong; [z y y] -> y wrong
    # votes@1 equal P@1; a 1-1-1 tie would go to the nearest: checked below
    assert accuracy == pytest.approx({1: 0.5, 3: 0.5})
    _, tie = agreement(np.array([[2, 0, 4]]), np.array(["y"]), reference_labels, [3])
    assert tie[3] == 1.0  # y, x, z once each: the nearest (y) wins


def test_knn_agreement_leave_one_out_and_split_on_a_line():
    # points on a line: 0, 1, 2 | 10, 11 | 20; leave-one-out with l2
    vectors = np.array([[0], [1], [2], [10], [11], [20]], np.float32)
    labels = np.array(["a", "a", "b", "b", "b", ""])  # the last has no label: left out, counted
    report = knn_agreement(vectors, labels, ["ACD"] * 6, [f"r{i}" for i in range(6)], None, [1], "l2")
    # nearest of 0 -> 1 (a, ok); 1 -> 0 (tie with 2 goes to the earlier: a, ok); 2 -> 1 (a, wrong);
    # 10 -> 11 (ok); 11 -> 10 (ok): 4/5
    assert report.rows[0].precision[1] == pytest.approx(0.8) and report.n_queries == 5
    assert report.left_out == {"records without a label": 1}
    sides = np.array(["train", "train", "test", "validation", "test", "train"])
    report = knn_agreement(vectors, labels, ["ACD"] * 6, [f"r{i}" for i in range(6)], None, [1], "l2", sides)
    # test queries 2 (nearest reference 1: a, wrong) and 11 (nearest 10: b, ok)
    assert report.rows[0].precision[1] == pytest.approx(0.5) and report.n_references == 3


def test_kmer_jaccard_and_tanimoto_against_hand_values():
    bits, usable = classical_sets("protein", ["ACDE", "CDEF", "ACDEACD"], ["a", "b", "c"])
    scores, rows = exact_search(bits, bits[:1], 3, "jaccard")
    # 3-mers: {ACD, CDE} vs {CDE, DEF}: 1/3; vs {ACD, CDE, DEA, EAC}: 2/4
    assert rows.tolist() == [[0, 2, 1]] and scores[0] == pytest.approx([1.0, 0.5, 1 / 3])
    from rdkit import DataStructs
    from rdkit.Chem import MolFromSmiles, rdFingerprintGenerator

    smiles = ["CCO", "CCN", "c1ccccc1O", "not a molecule"]
    bits, usable = classical_sets("smiles", smiles, ["a", "b", "c", "d"])
    assert usable.tolist() == [True, True, True, False] and bits.shape == (3, 2048)
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=2048)
    fingerprints = [generator.GetFingerprint(MolFromSmiles(s)) for s in smiles[:3]]
    scores, rows = exact_search(bits, bits, 3, "jaccard")
    for query in range(3):
        for score, row in zip(scores[query], rows[query]):
            assert score == pytest.approx(DataStructs.TanimotoSimilarity(fingerprints[query], fingerprints[row]))
    # by hand: CCO has bits {C(r0), C(r0, other env), O, CH2 env...}: ethanol vs itself 1, vs ethylamine < 1
    assert scores[0, 0] == 1.0 and rows[0, 0] == 0 and scores[0, 1] < 1.0


def test_evaluate_refuses_too_few_references():
    with pytest.raises(InputError, match="k = 5 needs more than 5 references"):
        knn_agreement(np.eye(4, dtype=np.float32), np.array(["a", "b", "a", "b"]), ["A"] * 4, list("wxyz"), None, [5])
    with pytest.raises(ConfigError):
        knn_agreement(np.eye(4, dtype=np.float32), np.array(["a", "b", "a", "b"]), ["A"] * 4, list("wxyz"), None, [0])


def test_index_json_records_every_files_checksum(tmp_path):
    build_index(write_embeddings(tmp_path / "e.h5ad", clustered(50, 5), [f"r{i}" for i in range(50)]),
                tmp_path / "ix", "approx", "l2")
    meta = json.loads((tmp_path / "ix" / "index.json").read_text())
    assert set(meta["crc32"]) == {"vectors-0.npy", "ids-0.json", "approx-50.faiss"}
    assert meta["embedding_info"]["model_fingerprint"] == "m" and meta["metric"] == "l2"
    index = SearchIndex.open(tmp_path / "ix")
    with pytest.raises(ConfigError, match="built for l2"):
        index.search(clustered(2, 6), 3, "cosine")
    scores, rows = index.search(index.vectors[:3], 2, "l2")
    assert rows[:, 0].tolist() == [0, 1, 2] and np.allclose(scores[:, 0], 0, atol=1e-3)  # distances, not squared


def edited_index(tmp_path, kind: str, edit) -> SearchIndex:
    """An index of 10 records whose index.json `edit` changed in place (a damaged or hand-edited index)."""
    build_index(write_embeddings(tmp_path / "e.npz", clustered(10, 7), [f"r{i}" for i in range(10)]),
                tmp_path / "ix", kind)
    path = tmp_path / "ix" / "index.json"
    meta = json.loads(path.read_text())
    edit(meta)
    path.write_text(json.dumps(meta))
    return tmp_path / "ix"


@pytest.mark.parametrize("kind, missing", [("exact", "vectors-0.npy"), ("exact", "ids-0.json"),
                                           ("approx", "approx-10.faiss")])
def test_every_file_the_index_needs_is_checked_whatever_the_crc_list_says(tmp_path, kind, missing):
    """An emptied or shortened crc32 list must not let a damaged file through unchecked."""
    directory = edited_index(tmp_path, kind, lambda meta: meta["crc32"].pop(missing))
    with pytest.raises(InputError, match=rf"index\.json has no CRC-32 of {missing}, so it cannot be checked"):
        SearchIndex.open(directory)
    directory = edited_index(tmp_path / "emptied", kind, lambda meta: meta["crc32"].clear())
    with pytest.raises(InputError, match="has no CRC-32 of vectors-0.npy"):
        SearchIndex.open(directory)


@pytest.mark.parametrize("approx", [None, {"file": 3}, {"file": "approx-10.faiss"}])
def test_an_exact_index_relabelled_approx_is_one_line(tmp_path, approx):
    def relabel(meta):
        meta["kind"] = "approx"
        if approx is not None:
            meta["approx"] = approx

    with pytest.raises(InputError, match=r"kind 'approx' but no approximate index .*rebuild the index, or set"):
        SearchIndex.open(edited_index(tmp_path, "exact", relabel))


def test_a_malformed_shard_is_one_line(tmp_path):
    directory = edited_index(tmp_path, "exact", lambda meta: meta["shards"][0].pop("ids"))
    with pytest.raises(InputError, match="a shard is .* not {\"vectors\": file, \"ids\": file, \"rows\": count}"):
        SearchIndex.open(directory)


@pytest.mark.parametrize("metric", ["cosine", "l2"])
@pytest.mark.parametrize("text", ["r1 - r2 + r3 - r1 + r2 - r3", "r1 - r1", "r4 + r5 - r4 - r5"])
def test_an_expression_whose_terms_cancel_is_refused_not_answered_with_noise(tmp_path, metric, text):
    from biotf.analysis.search.query import expression_queries

    index = SearchIndex.open(edited_index(tmp_path, "exact", lambda meta: None))
    with pytest.raises(InputError, match=rf"expression {re.escape(repr(text))}: its terms cancel \(norm .*, below 1e-06 x .*, the sum of its terms' norms\)"):
        expression_queries(index, [text], metric)
    assert len(expression_queries(index, ["r1 - r2 + r3"], metric).names) == 1


def test_evaluate_lists_unparsable_smiles_or_refuses_them_naming_the_option():
    pytest.importorskip("rdkit")
    smiles = ["CCO", "CCN", "c1ccccc1O", "c1ccccc1N", "CCCO", "C1=CC=CN1(C)(C)"]
    labels = np.array(["a", "b", "a", "b", "a", "b"])
    vectors = np.eye(6, dtype=np.float32)
    ids = [f"r{i}" for i in range(6)]
    report = knn_agreement(vectors, labels, smiles, ids, "smiles", [1])  # skip: as search evaluate always did
    assert report.unparsable == ["r5"] and report.n_queries == 5
    assert report.left_out == {"records without a Morgan fingerprint (RDKit cannot parse)": 1}
    with pytest.raises(InputError, match=r"\(record 'r5'\); set invalid_smiles=skip to leave such records out"):
        knn_agreement(vectors, labels, smiles, ids, "smiles", [1], invalid_smiles="error")
