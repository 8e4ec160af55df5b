"""Conventions every layer shares: the label value no loss is taken on."""

# The label of a position (or record) that is not scored: PyTorch's `cross_entropy` default `ignore_index`, which
# Hugging Face models use for the same purpose.
IGNORE_INDEX = -100
