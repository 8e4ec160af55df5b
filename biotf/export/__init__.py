"""Embedding export: pooling, windows for long records, the batched pipeline and npz/parquet/h5ad writers.

    from biotf.export import embed_file, read_embeddings
    stats = embed_file("outputs/protein_mlm/<run>", "proteins.fasta", "proteins.h5ad")
    sequences = npz_text(np.load("proteins.npz"), "sequences")  # an .npz's text columns, as strings
"""

from biotf.export.embed import LONG_POLICIES, EmbedOptions, EmbedStats, Embedder, RecordEmbedding
from biotf.export.files import embed_file
from biotf.export.pooling import POOLS
from biotf.export.windows import Window, plan_windows
from biotf.export.writers import FORMATS, EmbeddingTable, EmbeddingWriter, npz_text, read_embeddings

__all__ = [
    "FORMATS", "LONG_POLICIES", "POOLS", "EmbedOptions", "EmbedStats", "Embedder", "EmbeddingTable",
    "EmbeddingWriter", "RecordEmbedding", "Window", "embed_file", "npz_text", "plan_windows", "read_embeddings",
]
