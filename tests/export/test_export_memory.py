"""The writer's memory is bounded: per record it keeps only the id (and a length), whatever the sequence,
metadata and vectors weigh; `close()` assembles every format a chunk of rows at a time.

Measured with tracemalloc, which counts Python and numpy allocations exactly (no RSS noise): 3,000 records
of 1,000 residues and 2 x 256 floats would hold >= 3 MB of sequences and 6 MB of vectors if kept."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

import numpy as np
import pytest

from biotf.io.readers import Record
from biotf.io import embeddings
from biotf.io.embeddings import EmbeddingWriter, RecordEmbedding

RECORDS, LENGTH, DIM, CHUNK = 3000, 1000, 256, 50
BOUND = 2_000_000  # bytes: ids (~100 B a record) and one chunk of rows; a whole sequence column is >= 3 MB


def entries(per_token: bool) -> Iterator[RecordEmbedding]:
    """Made one at a time, so whatever the writer keeps of them stays allocated and is counted."""
    for i in range(RECORDS):
        vectors = np.ones((2, 1, DIM) if per_token else (2, DIM), np.float32)
        tokens = (np.zeros(1, np.int32), np.zeros(1, np.int32)) if per_token else ()
        yield RecordEmbedding(Record(f"r{i}", f"{i}" + "A" * LENGTH, {"note": f"{i}" + "x" * 200}, i), vectors, *tokens)


@pytest.mark.parametrize("per_token", [False, True])
@pytest.mark.parametrize("suffix", embeddings.EMBEDDING_FORMATS)
def test_writer_holds_ids_only_and_closes_chunk_by_chunk(tmp_path, monkeypatch, suffix, per_token):
    import anndata.io  # noqa: F401  (imports allocate; load them before measuring)
    import pyarrow.parquet  # noqa: F401

    monkeypatch.setattr(embeddings, "CHUNK_ROWS", CHUNK)
    info = {"pool": "none" if per_token else "mean"}
    with EmbeddingWriter(tmp_path / f"warm{suffix}", ["embeddings"], per_token, info) as writer:  # lazy imports
        writer.add(next(entries(per_token)))
        writer.close()
    tracemalloc.start()
    try:
        with EmbeddingWriter(tmp_path / f"e{suffix}", ["layer_0", "embeddings"], per_token, info) as writer:
            start = tracemalloc.get_traced_memory()[0]
            for item in entries(per_token):
                writer.add(item)
            held = tracemalloc.get_traced_memory()[0] - start
            tracemalloc.reset_peak()
            writer.close()
            closing = tracemalloc.get_traced_memory()[1] - start
    finally:
        tracemalloc.stop()
    assert held < 150 * RECORDS, f"the writer holds {held} bytes for {RECORDS} records"
    assert closing < BOUND, f"close() peaked {closing} bytes above the start"
