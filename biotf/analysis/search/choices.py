"""The values `biotf search` offers, importable without torch (the command's parser lists them)."""

METRICS = ("cosine", "l2")  # what users choose; "jaccard" is the classical neighbour of `biotf search evaluate`
KINDS = ("exact", "approx")  # index types
