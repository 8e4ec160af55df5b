"""Counting repeated record ids in memory that does not grow with the input.

A set of every id seen grows by about 60 bytes a record: 1 GiB for the 16 million records of a 10 GB FASTA.
`DuplicateCounter` keeps 64-bit hashes of the ids in a buffer of `BUFFER_KEYS`; when it fills, its keys are sorted
and appended to one of `BUCKETS` temporary files by their top bits, so that equal keys always meet in the same
file. The count is known at the end (`count`): each bucket is read alone and its repeats counted. Memory: the
buffer (8 MiB) plus one bucket (1/256 of the keys: 0.5 MiB for 16 million). Two different ids count as one
repeated id only if their 64-bit hashes collide (about 1 in 10^5 for 10^7 records).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np

BUFFER_KEYS = 1 << 20
BUCKETS = 256


class DuplicateCounter:
    """`add` each key (an int hash of an id); `count()` once at the end: how many keys equal an earlier one."""

    def __init__(self):
        self.buffer = np.empty(BUFFER_KEYS, np.int64)  # pages are touched (and counted in RSS) as keys fill them
        self.filled = 0
        self.added = 0  # keys added in all
        self.spilled: Path | None = None

    def add(self, key: int) -> None:
        self.buffer[self.filled] = key
        self.filled += 1
        self.added += 1
        if self.filled == len(self.buffer):
            self._spill()

    def add_ids(self, ids: list[str]) -> None:
        """`add` the hash of each of `ids`, in one pass over the list."""
        keys = np.fromiter(map(hash, ids), np.int64, len(ids))
        self.added += len(keys)
        while len(keys):
            taken = keys[:len(self.buffer) - self.filled]
            self.buffer[self.filled:self.filled + len(taken)] = taken
            self.filled += len(taken)
            keys = keys[len(taken):]
            if self.filled == len(self.buffer):
                self._spill()

    def count(self) -> int:
        """Keys that repeat an earlier key; removes the spilled files."""
        if self.spilled is None:
            return repeats(self._keys())
        try:
            self._spill()
            return sum(repeats(np.fromfile(path, np.uint64)) for path in sorted(self.spilled.iterdir()))
        finally:
            self.close()

    def close(self) -> None:
        """Remove the spilled files (also when reading stopped early)."""
        if self.spilled is not None:
            shutil.rmtree(self.spilled, ignore_errors=True)
            self.spilled = None

    def _keys(self) -> np.ndarray:
        keys = self.buffer[:self.filled].view(np.uint64).copy()
        self.filled = 0
        return keys

    def _spill(self) -> None:
        if self.spilled is None:
            self.spilled = Path(tempfile.mkdtemp(prefix="biotf-ids-"))
        keys = np.sort(self._keys())
        bounds = np.searchsorted(keys >> np.uint64(56), np.arange(BUCKETS + 1, dtype=np.uint64))
        for bucket in np.flatnonzero(np.diff(bounds)):
            with open(self.spilled / f"{bucket:03d}.bin", "ab") as handle:  # not `tofile`: `save_array` says why
                handle.write(keys[bounds[bucket]:bounds[bucket + 1]])


def repeats(keys: np.ndarray) -> int:
    """How many of `keys` equal an earlier one: equal neighbours once sorted (np.unique, hash-based in numpy 2,
    takes 100x longer on 64-bit hashes)."""
    keys = np.sort(keys)
    return int(np.count_nonzero(keys[1:] == keys[:-1]))
