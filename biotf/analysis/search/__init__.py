"""Similarity search over embedding files: exact and approximate (faiss HNSW) nearest neighbours, index directories
that grow without a rebuild, queries by sequence / id / id arithmetic, and kNN label agreement beside the
classical neighbour of each modality (`biotf search`)."""
