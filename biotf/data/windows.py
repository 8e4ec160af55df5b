"""Overlapping windows for records longer than the model: where each window starts and which tokens it owns.

A record of n content tokens (special tokens excluded) and a model that fits `width` content tokens per
window is cut into windows of `width` tokens that advance by `width - overlap`; the last window is aligned
with the record's end, so no window is short. Every token is *owned* by exactly one window, the one that
sees it with the most context on both sides: consecutive windows hand over in the middle of their
overlap (as the sliding-window evaluation of long documents in HF's "perplexity of fixed-length models"
guide, but symmetric, since biotf encoders see both sides). Pooling across windows then pools the owned
tokens, so a chunked record counts each token once.
"""

from __future__ import annotations

from typing import NamedTuple

from biotf.errors import ConfigError, check_int


class Window(NamedTuple):
    """Content tokens [start, end) go through the model; the window's vectors for [own_start, own_end) are kept."""

    start: int
    end: int
    own_start: int
    own_end: int


def plan_windows(n_tokens: int, width: int, overlap: int) -> list[Window]:
    """Windows covering `n_tokens` content tokens, each at most `width` long, owning disjoint ranges that tile [0, n)."""
    check_int("width", width)
    if not 0 <= overlap < width:
        raise ConfigError("overlap", overlap, allowed=f"an integer in [0, {width - 1}] (below the window width {width})")
    if n_tokens <= width:
        return [Window(0, n_tokens, 0, n_tokens)]
    step = width - overlap
    starts = list(range(0, n_tokens - width, step)) + [n_tokens - width]
    # Hand over at the middle of each overlap: [next start, this end).
    cuts = [0] + [(following + current + width) // 2 for current, following in zip(starts, starts[1:])] + [n_tokens]
    return [Window(start, start + width, cuts[i], cuts[i + 1]) for i, start in enumerate(starts)]
