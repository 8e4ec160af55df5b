"""Embedding export: pooling, windows for long records (`biotf.data.windows`), the batched pipeline and
npz/parquet/h5ad writers.

    from biotf.export import embed_file, read_embeddings
    stats = embed_file("outputs/protein_mlm/<run>", "proteins.fasta", "proteins.h5ad")
    sequences = npz_text(np.load("proteins.npz"), "sequences")  # an .npz's text columns, as strings
"""

from biotf.lazy import lazy_exports

# name -> submodule; each is imported when first used (see biotf/lazy.py).
_EXPORTS = {
    "EmbedOptions": "embed", "EmbedStats": "embed", "Embedder": "embed", "RecordEmbedding": "embed",
    "embed_file": "files", "EmbedRun": "files", "stats_from_counts": "files",
    "EMBEDDING_FORMATS": "choices", "POOLS": "pooling", "EMBED_LONG_POLICIES": "choices",
    "EmbeddingTable": "writers", "EmbeddingWriter": "writers",
    "read_embeddings": "writers", "npz_text": "writers",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
