"""Conventions every layer shares: the label value no loss is taken on, and the names of the inference precisions."""

# The label of a position (or record) that is not scored: PyTorch's `cross_entropy` default `ignore_index`, which
# Hugging Face models use for the same purpose.
IGNORE_INDEX = -100

# The precisions a loaded model runs inference in (`biotf.model.precision` says what each does), named apart from that
# module so that a command's parser lists them without importing torch.
PRECISIONS = ("fp32", "bf16", "int8", "auto")
