"""Packing: several records share one row of `max_length` tokens, so that a batch holds tokens, not padding.

`first_fit_decreasing` bins records by length (each bin a row), within a window of shuffled records: longer
windows pack tighter, shorter ones keep batches random. `PackedBatchSampler` yields each batch's records in row
order, `batch_size` rows to a batch; the collator (`MLMCollator(pack_length=...)`) cuts them into rows again with
`next_fit_rows`, which reproduces the bins exactly: a record opens a new bin in first-fit decreasing only when it
fits none of the bins before, and those only fill up afterwards, so it does not fit the row before it either.
Rows carry segment ids (`biotf.model.segments`): the model keeps each record to itself.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from biotf.data.datasets import LengthGroupedBatchSampler
from biotf.errors import ConfigError, check_int


def first_fit_decreasing(lengths: np.ndarray, capacity: int) -> list[list[int]]:
    """Bins of indices into `lengths` (each total <= capacity), longest first into the first bin that fits; each
    bin's indices in the order they were placed (decreasing length)."""
    bins: list[list[int]] = []
    free: list[int] = []
    for index in np.argsort(-lengths, kind="stable"):
        length = int(lengths[index])
        for number, room in enumerate(free):
            if length <= room:
                bins[number].append(int(index))
                free[number] -= length
                break
        else:
            bins.append([int(index)])
            free.append(capacity - length)
    return bins


def next_fit_rows(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Consecutive indices cut into rows, a new row where the next length does not fit the current one."""
    rows: list[list[int]] = []
    used = capacity
    for index, length in enumerate(lengths):
        if used + length > capacity:
            rows.append([])
            used = 0
        rows[-1].append(index)
        used += length
    return rows


class PackedBatchSampler(LengthGroupedBatchSampler):
    """Batches of `batch_size` packed rows of `capacity` tokens, the records of each batch listed row by row.

    As `LengthGroupedBatchSampler` (whose windows, shuffles, ranks and resume it shares): records shuffled by
    (seed, epoch), cut into windows of `batch_size * group_batches` records, each window packed by
    `first_fit_decreasing`, its rows cut into batches, the batches shuffled again. Every record is in exactly one
    batch per epoch; the number of batches depends on the epoch's packing, so it is computed (once per epoch)."""

    def __init__(self, lengths: np.ndarray, batch_size: int, capacity: int, **options):
        check_int("data.max_length", capacity, 1)
        super().__init__(lengths, batch_size, **options)
        if len(self.lengths) and int(self.lengths.max()) > capacity:
            raise ConfigError("data.max_length", capacity, reason=f"a record of {int(self.lengths.max())} tokens "
                              "does not fit one packed row (records are cropped or dropped to max_length first)")
        self.capacity = capacity
        self._counted: tuple[int, int] | None = None  # (epoch, batches of the whole epoch on this rank)

    def _window_batches(self, members: np.ndarray) -> list[np.ndarray]:
        rows = [members[row] for row in first_fit_decreasing(self.lengths[members], self.capacity)]
        return [np.concatenate(rows[i:i + self.batch_size]) for i in range(0, len(rows), self.batch_size)]

    def __len__(self) -> int:
        if self._counted is None or self._counted[0] != self.epoch:
            start, self.start_batch = self.start_batch, 0
            self._counted = (self.epoch, len(self._all_batches()))
            self.start_batch = start
        return max(0, self._counted[1] - self.start_batch)

    def padding_fraction(self) -> float:
        """The share of pad tokens in this epoch's rows of `capacity` tokens, over this rank's batches."""
        real = rows = 0
        for batch in self._all_batches():
            real += int(self.lengths[batch].sum())
            rows += len(next_fit_rows(self.lengths[batch].tolist(), self.capacity))
        return 1 - real / (rows * self.capacity) if rows else 0.0
