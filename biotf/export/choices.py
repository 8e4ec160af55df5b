"""The values `biotf embed` offers, importable without torch (the command's parser lists them)."""

EMBEDDING_FORMATS = (".npz", ".parquet", ".h5ad")  # output files, by extension (writers.py implements them)
# What `biotf embed --long` does with a record longer than the model: windows, its first tokens, or an error.
EMBED_LONG_POLICIES = ("chunk", "truncate", "error")
