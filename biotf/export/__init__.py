"""Embedding export: pooling, windows for long records (`biotf.data.windows`) and the batched pipeline; the
npz/parquet/h5ad files it writes are `biotf.io.embeddings`'s.

    from biotf.export import embed_file
    from biotf.io import read_embeddings
    stats = embed_file("outputs/protein_mlm/<run>", "proteins.fasta", "proteins.h5ad")
    table = read_embeddings("proteins.h5ad")
"""

from biotf.lazy import lazy_exports

# What `biotf embed --long` does with a record longer than the model: windows, its first tokens, or an error (here so
# that the command's parser lists them without torch).
EMBED_LONG_POLICIES = ("chunk", "truncate", "error")

# name -> submodule; each is imported when first used (see biotf/lazy.py).
_EXPORTS = {
    "EmbedOptions": "embed", "EmbedStats": "embed", "Embedder": "embed",
    "embed_file": "embed_job", "EmbedRun": "embed_job", "stats_from_counts": "embed_job", "POOLS": "pooling",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted([*_EXPORTS, "EMBED_LONG_POLICIES"])
