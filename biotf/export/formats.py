"""The output formats `biotf embed` writes, chosen by the output's extension (writers.py implements them).

Apart from the writers so that the command's parser lists them without importing torch.
"""

FORMATS = (".npz", ".parquet", ".h5ad")
