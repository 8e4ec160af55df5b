"""Packing: several records share one row of `max_length` tokens, so that a batch holds tokens, not padding.

`first_fit_decreasing` bins records by length (each bin a row), within a window of shuffled records: longer
windows pack tighter, shorter ones keep batches random. `PackedBatchSampler` yields each batch's records in row
order, `batch_size` rows to a batch; the collator (`MLMCollator(pack_length=...)`) cuts them into rows again with
`next_fit_rows`, which reproduces the bins exactly: a record opens a new bin in first-fit decreasing only when it
fits none of the bins before, and those only fill up afterwards, so it does not fit the row before it either.
Rows carry segment ids (`biotf.model.segments`): the model keeps each record to itself.

Inference (`biotf embed`, `score`, `predict`) forms its rows with `inference_rows` / `inference_batches` and fills
them with `fill_rows`: one sequence a row, longest first, or (packing) first-fit decreasing into rows as long as the
longest sequence, so a packed batch never holds more tokens than the padded one it replaces. `check_packable` refuses
packing for a model that cannot keep records apart in one row.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from biotf.data.datasets import LengthGroupedBatchSampler
from biotf.errors import ConfigError, check_int

if TYPE_CHECKING:
    from biotf.model.config import TransformerConfig


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


def check_packable(packing: object, config: TransformerConfig | None = None) -> None:
    """ConfigError unless `packing` is a bool that the model of `config` (if given) can follow: a convolutional stem's
    bins would mix the ends of two records that share a row."""
    if not isinstance(packing, bool):
        raise ConfigError("packing", packing, allowed="true | false")
    if packing and config is not None and config.stem != "none":
        raise ConfigError("packing", True, allowed="false", reason="the model has a convolutional stem (stem: "
                          f"{config.stem}), whose bins would mix the ends of two records sharing a row")


def inference_rows(lengths: Sequence[int] | np.ndarray, packing: bool) -> list[list[int]]:
    """Rows of indices into `lengths`, longest first: one sequence a row, or with `packing` rows as long as the longest
    sequence, filled by first-fit decreasing."""
    lengths = np.asarray(lengths, np.int64)
    if not len(lengths):
        return []
    if packing:
        return first_fit_decreasing(lengths, int(lengths.max()))
    return [[int(index)] for index in np.argsort(-lengths, kind="stable")]


def inference_batches(lengths: Sequence[int] | np.ndarray, batch_tokens: int,
                      packing: bool) -> Iterator[list[list[int]]]:
    """`inference_rows` cut into batches of at most `batch_tokens` padded tokens (one row at least): a batch's width is
    its first (longest) row's, or with `packing` the longest sequence's."""
    lengths = np.asarray(lengths, np.int64)
    packed_width = int(lengths.max()) if len(lengths) else 0
    batch: list[list[int]] = []
    for row in inference_rows(lengths, packing):
        if batch and (len(batch) + 1) * (packed_width if packing else int(lengths[batch[0][0]])) > batch_tokens:
            yield batch
            batch = []
        batch.append(row)
    if batch:
        yield batch


@dataclass
class FilledRows:
    """A batch of rows ready for the model: `ids` (rows, longest row) right-padded, `segments` numbering the sequences
    of each row from 1 (0: padding), and `spans` (row, start, length) of each sequence in the order given."""

    ids: np.ndarray
    segments: np.ndarray
    spans: list[tuple[int, int, int]]
    packed: bool

    def inputs(self, device: torch.device | str) -> dict[str, torch.Tensor]:
        """The model's keyword arguments besides `input_ids`: `segment_ids` for packed rows, each sequence attending to
        itself alone; `attention_mask` for padded rows (none when no row is padded: SDPA's fast path)."""
        if self.packed:
            return {"segment_ids": torch.from_numpy(self.segments).to(device)}
        if self.segments.all():
            return {}
        return {"attention_mask": torch.from_numpy(self.segments).to(device)}


def fill_rows(rows: Sequence[Sequence[np.ndarray]], pad_id: int, packed: bool) -> FilledRows:
    """The token ids of `rows` (each a list of sequences, one unless `packed`) laid end to end in each row."""
    longest = max(sum(len(sequence) for sequence in row) for row in rows)
    ids = np.full((len(rows), longest), pad_id, np.int64)
    segments = np.zeros((len(rows), longest), np.int64)
    spans = []
    for number, row in enumerate(rows):
        start = 0
        for segment, sequence in enumerate(row, 1):
            ids[number, start:start + len(sequence)] = sequence
            segments[number, start:start + len(sequence)] = segment
            spans.append((number, start, len(sequence)))
            start += len(sequence)
    return FilledRows(ids, segments, spans, packed)


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
