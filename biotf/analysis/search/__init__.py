"""Similarity search over embedding files: exact and approximate (faiss HNSW) nearest neighbours, index directories
that grow without a rebuild, queries by sequence / id / id arithmetic, and kNN label agreement beside the
classical neighbour of each modality (`biotf search`)."""

# The values `biotf search` offers, here so that the command's parser lists them without torch.
METRICS = ("cosine", "l2")  # what users choose; "jaccard" is the classical neighbour of `biotf search evaluate`
KINDS = ("exact", "approx")  # index types
