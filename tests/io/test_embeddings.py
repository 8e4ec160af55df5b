"""Embedding files open in their own libraries (numpy, pandas, anndata), read back, and are all-or-nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest

from biotf.io.readers import Record
from biotf.errors import InputError
from biotf.io import embeddings
from biotf.io.embeddings import EmbeddingWriter, RecordEmbedding, npz_text, read_embeddings

LAYERS = ["layer_0", "embeddings"]
INFO = {"pool": "mean", "tokenizer": "protein"}


def items(per_token: bool, n: int = 5, dim: int = 3) -> list[RecordEmbedding]:
    rng = np.random.default_rng(1)
    result = []
    for i in range(n):
        record = Record(f"id{i}", "ACDE"[: i % 4 + 1], {"label": f"L{i % 2}", "note": "é,\"q\""}, i)
        if per_token:
            length = i % 3 + 1
            result.append(RecordEmbedding(record, rng.normal(size=(2, length, dim)).astype(np.float32),
                                          np.arange(length, dtype=np.int32) + 4, np.arange(length, dtype=np.int32)))
        else:
            result.append(RecordEmbedding(record, rng.normal(size=(2, dim)).astype(np.float32)))
    return result


def write(path, entries, per_token=False):
    with EmbeddingWriter(path, LAYERS, per_token, {**INFO, "pool": "none" if per_token else "mean"}) as writer:
        for entry in entries:
            writer.add(entry)
        writer.close()
    return path


def test_npz_opens_in_numpy(tmp_path):
    pooled, tokens = items(False), items(True)
    with np.load(write(tmp_path / "e.npz", pooled), allow_pickle=False) as data:
        assert npz_text(data, "ids").tolist() == [e.record.id for e in pooled]
        assert npz_text(data, "metadata/note").tolist() == ["é,\"q\""] * 5
        np.testing.assert_array_equal(data["embeddings"], np.stack([e.vectors[1] for e in pooled]))
        np.testing.assert_array_equal(data["layer_0"], np.stack([e.vectors[0] for e in pooled]))
        assert json.loads(str(data["info"]))["records"] == 5
    with np.load(write(tmp_path / "t.npz", tokens, per_token=True), allow_pickle=False) as data:
        offsets = data["offsets"]
        for i, entry in enumerate(tokens):  # each record's tokens map back through the offsets
            rows = slice(offsets[i], offsets[i + 1])
            np.testing.assert_array_equal(data["embeddings"][rows], entry.vectors[1])
            assert data["record_index"][rows].tolist() == [i] * len(entry.positions)
            assert data["position"][rows].tolist() == entry.positions.tolist()


def test_npz_text_is_compact_utf8_without_pickles(tmp_path):
    """One long sequence must not make every row as wide as it (fixed-width unicode: 4 bytes x the longest)."""
    from biotf.io.readers import Record

    texts = ["M" * 20000, "MK", "", "é字🧬"] + ["MKV"] * 96
    entries = [RecordEmbedding(Record(f"r{i}", text or "X", {"note": text}, i), np.zeros((2, 4), np.float32))
               for i, text in enumerate(texts)]
    path = write(tmp_path / "e.npz", entries)
    with np.load(path, allow_pickle=False) as data:
        assert npz_text(data, "metadata/note").tolist() == texts
        assert npz_text(data, "sequences").tolist() == [t or "X" for t in texts]
        assert data["metadata/note.utf8"].dtype == np.uint8 and data["metadata/note.offsets"].dtype == np.int64
        assert data["metadata/note.offsets"][-1] == data["metadata/note.utf8"].size == sum(len(t.encode()) for t in texts)
        assert not any(data[name].dtype.kind == "O" for name in data.files)
        # Short, even columns stay numpy's plain string arrays, which np.load users index directly.
        assert data["ids"].dtype == np.dtype("<U3") and data["ids"].tolist() == [f"r{i}" for i in range(100)]
        assert "sequences" not in data.files and "metadata/note" not in data.files
    text_bytes = 2 * sum(len(t.encode()) for t in texts)  # sequences and the note column
    assert path.stat().st_size < text_bytes + 100 * 8 * 6 + 20000  # bytes + offsets + headers; fixed width: 16 MB
    assert read_embeddings(path).sequences[0] == "M" * 20000
    # files written with the former fixed-width layout read the same
    old = tmp_path / "old.npz"
    np.savez(old, ids=np.array(["a", "b"]), sequences=np.array(["MK", "MKV"]), embeddings=np.zeros((2, 4), np.float32),
             info=np.array(json.dumps({**INFO, "pool": "mean"})), **{"metadata/note": np.array(["x", "y"])})
    table = read_embeddings(old)
    assert table.ids.tolist() == ["a", "b"] and table.metadata["note"].tolist() == ["x", "y"]


def test_parquet_opens_in_pandas(tmp_path):
    import pandas as pd

    pooled = items(False)
    frame = pd.read_parquet(write(tmp_path / "e.parquet", pooled))
    assert frame["id"].tolist() == [e.record.id for e in pooled]
    assert frame["label"].tolist() == ["L0", "L1", "L0", "L1", "L0"]
    np.testing.assert_array_equal(np.stack(frame["embeddings"].to_numpy()), np.stack([e.vectors[1] for e in pooled]))
    tokens = items(True)
    frame = pd.read_parquet(write(tmp_path / "t.parquet", tokens, per_token=True))
    assert len(frame) == sum(len(e.positions) for e in tokens)
    assert frame["id"].iloc[-1] == "id4" and frame["token_id"].tolist()[:2] == [4, 4]


def test_h5ad_opens_in_anndata(tmp_path):
    import anndata

    pooled = items(False)
    data = anndata.read_h5ad(write(tmp_path / "e.h5ad", pooled))
    assert data.obs_names.tolist() == [e.record.id for e in pooled]
    assert data.obs["label"].tolist()[:2] == ["L0", "L1"]
    np.testing.assert_array_equal(data.X, np.stack([e.vectors[1] for e in pooled]))
    np.testing.assert_array_equal(data.obsm["layer_0"], np.stack([e.vectors[0] for e in pooled]))
    tokens = anndata.read_h5ad(write(tmp_path / "t.h5ad", items(True), per_token=True))
    assert tokens.n_obs == 9 and tokens.obs["record_index"].tolist()[:3] == [0, 1, 1]


@pytest.mark.parametrize("suffix", embeddings.EMBEDDING_FORMATS)
def test_read_back(tmp_path, suffix):
    pooled = items(False)
    table = read_embeddings(write(tmp_path / f"e{suffix}", pooled))
    assert table.ids.tolist() == [e.record.id for e in pooled]
    assert table.sequences.tolist() == [e.record.sequence for e in pooled]
    assert table.metadata["label"].tolist() == [e.record.metadata["label"] for e in pooled]
    np.testing.assert_array_equal(table.arrays["embeddings"], np.stack([e.vectors[1] for e in pooled]))
    assert table.info["tokenizer"] == "protein"
    with pytest.raises(InputError, match="per-token"):
        read_embeddings(write(tmp_path / f"t{suffix}", items(True), per_token=True))


def test_failure_leaves_nothing(tmp_path, monkeypatch):
    def broken(path, writer):
        path.write_bytes(b"half")
        raise OSError("disk full")

    monkeypatch.setitem(embeddings.WRITERS, ".npz", broken)
    with pytest.raises(OSError, match="disk full"):
        write(tmp_path / "e.npz", items(False))
    with pytest.raises(RuntimeError):
        with EmbeddingWriter(tmp_path / "f.h5ad", LAYERS, False, INFO) as writer:
            writer.add(items(False)[0])
            raise RuntimeError("interrupted mid-stream")
    assert list(tmp_path.iterdir()) == []


def test_bad_extension_and_column_clash(tmp_path):
    with pytest.raises(InputError, match=r"'\.csv'.*allowed: \.npz, \.parquet, \.h5ad"):
        EmbeddingWriter(tmp_path / "e.csv", LAYERS, False, INFO)
    entry = items(False)[0]
    clash = RecordEmbedding(Record("x", "AC", {"embeddings": "1"}, 0), entry.vectors)
    with pytest.raises(InputError, match="'embeddings' clashes"):
        write(tmp_path / "e.npz", [clash])
    assert list(tmp_path.iterdir()) == []


def with_metadata(metadata: dict[str, str]) -> list[RecordEmbedding]:
    return [RecordEmbedding(Record(e.record.id, e.record.sequence, dict(metadata), i), e.vectors)
            for i, e in enumerate(items(False))]


@pytest.mark.parametrize("first, second, alias", [("x", "x.npy", "metadata/x.npy"),
                                                  ("x", "x.utf8", "metadata/x.utf8"),
                                                  ("x.utf8", "x.offsets", "metadata/x")])
def test_npz_refuses_columns_np_load_would_read_as_one_and_other_formats_keep_them(tmp_path, first, second, alias):
    """numpy answers np.load(path)["x.npy"] with member x.npy, which is column x's array, not column x.npy's."""
    entries = with_metadata({first: "first", second: "second"})
    with pytest.raises(InputError, match=rf"metadata column {first!r} and metadata column {second!r} cannot share "
                                         rf"one \.npz: both would be read as np\.load\(path\)\[{alias!r}\]"):
        write(tmp_path / "e.npz", entries)
    assert list(tmp_path.iterdir()) == []
    table = read_embeddings(write(tmp_path / "e.parquet", entries))
    assert table.metadata[first].tolist() == ["first"] * 5 and table.metadata[second].tolist() == ["second"] * 5


@pytest.mark.parametrize("column", ["x.utf8", "x.offsets", "x.npy"])
def test_npz_reads_back_a_column_named_like_a_layout_array(tmp_path, column):
    """Alone, such a column is no clash: the reader takes `<name>.utf8` + `<name>.offsets` pairs only as one column."""
    entries = with_metadata({column: "kept"})
    entries[0].record.metadata["long"] = "A" * 200  # stored as the two arrays long.utf8, long.offsets
    table = read_embeddings(write(tmp_path / "e.npz", entries))
    assert {k: v.tolist() for k, v in table.metadata.items()} == {column: ["kept"] * 5, "long": ["A" * 200] + [""] * 4}


def test_output_is_readable_like_a_plain_file(tmp_path):
    import os
    import stat

    umask = os.umask(0o022)
    try:
        path = write(tmp_path / "e.npz", items(False))
    finally:
        os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # not mkstemp's 0600
