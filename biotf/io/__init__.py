"""Files in and out, one home for every format and for the rule every output follows.

- `readers` (with `fasta`, `duplicates`): every input format as a stream of `Record`s;
- `embeddings`: embedding files (.npz, .parquet, .h5ad), written from spools and read back;
- `tables`: rows of named columns as .csv, .tsv or .parquet;
- `outputs`: the output rule (the extension, never the input, never an existing file without --overwrite, a lock
  per output) and the leftovers of killed runs; `atomic`: all-or-nothing writes; `npz`: the array-name rule of
  every .npz written.

    from biotf.io import read_embeddings, read_records
    records = list(read_records("proteins.fasta"))
    table = read_embeddings("proteins.h5ad")
"""

from biotf.lazy import lazy_exports

# name -> submodule; each is imported when first used (see biotf/lazy.py).
_EXPORTS = {
    "INPUT_FORMATS": "readers", "ReaderOptions": "readers", "Record": "readers", "detect_format": "readers",
    "read_records": "readers", "EMBEDDING_FORMATS": "embeddings", "EmbeddingTable": "embeddings",
    "EmbeddingWriter": "embeddings", "RecordEmbedding": "embeddings", "npz_text": "embeddings",
    "read_embeddings": "embeddings", "TABLE_FORMATS": "tables", "write_table": "tables",
    "claim_output": "outputs", "output_format": "outputs", "atomic_write": "atomic",
}
__getattr__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
