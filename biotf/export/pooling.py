"""Pooling token vectors into one vector per record, window by window.

A record may pass through the model in several windows (`biotf.data.windows`), so pooling is split in
two: `pool_window` reduces the tokens one window owns to a partial result, and `combine` merges the
partials of a record. Both only ever see *content* tokens: special tokens (<cls>, <eos>, <mask>, ...) and
padding are excluded by the caller's `keep` mask, as ESM's `extract.py` excludes BOS/EOS from its mean.

- mean: sum and count per window, divided once at the end (every owned token weighs the same);
- max: element-wise maximum over content tokens;
- cls: the window's first token (the tokenizer's <cls>); windows of one record are averaged;
- none: every content token's vector, in order, with its 0-based position in the record.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from biotf.errors import InputError

POOLS = ("mean", "cls", "max", "none")


class Partial(NamedTuple):
    """One window's contribution: `value` is (layers, D) for mean/max/cls, (layers, tokens, D) for none."""

    value: np.ndarray
    count: int


def pool_window(hidden: np.ndarray, owned: slice, keep: np.ndarray, pool: str) -> Partial:
    """Reduce one window. `hidden` is (layers, window tokens, D); `keep` marks content tokens within `owned`."""
    count = int(keep.sum())
    if pool == "cls":
        return Partial(hidden[:, 0].astype(np.float64), count)
    tokens = hidden[:, owned][:, keep]
    if pool == "mean":
        return Partial(tokens.sum(axis=1, dtype=np.float64), count)
    if pool == "max":
        if count == 0:
            return Partial(np.full(hidden[:, 0].shape, -np.inf, np.float32), 0)
        return Partial(tokens.max(axis=1), count)
    return Partial(tokens, count)


def combine(partials: list[Partial], pool: str, record: str) -> np.ndarray:
    """The record's float32 vectors from its windows' partials; a record without content tokens is an error."""
    count = sum(p.count for p in partials)
    if count == 0:
        raise InputError(f"record {record!r} has no content tokens to pool (only special tokens)")
    if pool == "mean":
        return (sum(p.value for p in partials) / count).astype(np.float32)
    if pool == "max":
        return np.maximum.reduce([p.value for p in partials]).astype(np.float32)
    if pool == "cls":
        return (sum(p.value for p in partials) / len(partials)).astype(np.float32)
    return np.concatenate([p.value for p in partials], axis=1).astype(np.float32, copy=False)
