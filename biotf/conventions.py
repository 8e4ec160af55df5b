"""Conventions every layer shares: the label value no loss is taken on, the names of the inference precisions,
how run summaries word counts, and where the Hydra config tree and the data samples lie."""

from __future__ import annotations

from pathlib import Path

# The label of a position (or record) that is not scored: PyTorch's `cross_entropy` default `ignore_index`, which
# Hugging Face models use for the same purpose.
IGNORE_INDEX = -100

# The precisions a loaded model runs inference in (`biotf.model.precision` says what each does), named apart from that
# module so that a command's parser lists them without importing torch.
PRECISIONS = ("fp32", "bf16", "int8", "auto")

# biotf/conf and biotf/samples are the repository's conf/ and data/ (symbolic links in a checkout, copies inside an
# installed wheel).
PACKAGE_DIR = Path(__file__).resolve().parent
CONF_DIR = PACKAGE_DIR / "conf"  # Hydra groups; conf/model/<name>.yaml is the one source of each preset
SAMPLES_DIR = PACKAGE_DIR / "samples"  # the small public data files the default configs train on


def counted(count: int, noun: str) -> str:
    """`count` and `noun` (a regular English noun), plural unless the count is exactly one: `1 record`, `2 records`,
    `0 windows`, `1,000 samples` (never `1 records`)."""
    return f"{count:,} {noun if count == 1 else noun + 's'}"


def listed(ids: list[str], at_most: int = 20) -> str:
    """`ids` joined by commas, the first `at_most` of them and how many more: a summary line stays one line."""
    shown = ", ".join(ids[:at_most])
    return shown + (f" and {len(ids) - at_most} more" if len(ids) > at_most else "")
