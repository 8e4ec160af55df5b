"""Returning freed heap pages to the operating system, so that a process's RSS follows its live memory.

glibc serves an allocation above its mmap threshold with its own mapping, returned at free; but the first such free
raises the threshold (up to 32 MiB), and from then on tensors of that size come from the heap, where freed pages stay
resident until the heap is trimmed. `release_free_heap` trims it: `Embedder` after every batch (freed activations),
the loader after timing the decoding plan (its test matrices), before the next large allocations come.
"""

from __future__ import annotations

import ctypes

try:
    _MALLOC_TRIM = ctypes.CDLL(None).malloc_trim  # glibc only; elsewhere (macOS, musl) the trim is skipped
except (OSError, AttributeError):
    _MALLOC_TRIM = None


def release_free_heap() -> None:
    """Return the heap's free pages to the OS (glibc `malloc_trim`), so RSS follows live memory."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)
