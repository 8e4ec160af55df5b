"""Segment ids of packed rows: several records in one row, each a run of its own id, padding 0.

A record's tokens must be one contiguous run: its positions restart where its run starts, and attention joins
tokens of equal ids, so an id that came back later in the row would join two runs that the positions keep apart.
"""

from __future__ import annotations

import torch

from biotf.errors import InputError


def check_segments(segment_ids: torch.Tensor, shape: torch.Size) -> None:
    """Raise InputError unless `segment_ids` are integers >= 0 of `shape`, each id one contiguous run per row."""
    if tuple(segment_ids.shape) != tuple(shape):
        raise InputError(f"segment_ids must have the shape of input_ids {tuple(shape)}, got {tuple(segment_ids.shape)}")
    if segment_ids.is_floating_point() or segment_ids.dtype == torch.bool:
        raise InputError(f"segment_ids must be integers (0 for padding, one id per record), got {segment_ids.dtype}")
    if segment_ids.numel() == 0:
        return
    if int(segment_ids.min()) < 0:
        raise InputError("segment_ids must be >= 0 (0 for padding, one id per record)")
    starts = _run_starts(segment_ids) & (segment_ids != 0)
    present = torch.zeros(segment_ids.shape[0], int(segment_ids.max()) + 1, dtype=torch.bool,
                          device=segment_ids.device).scatter_(1, segment_ids, True)[:, 1:]
    runs, ids = starts.sum(-1), present.sum(-1)
    if bool((runs != ids).any()):
        row = int((runs != ids).nonzero()[0, 0])
        raise InputError(f"segment_ids row {row}: a record's id appears in {int(runs[row]) - int(ids[row]) + 1} "
                         "or more separate runs; each record must be one contiguous run of its own id")


def segment_positions(segment_ids: torch.Tensor) -> torch.Tensor:
    """Position ids restarting at 0 where each run of equal ids starts, (batch, length) int64."""
    index = torch.arange(segment_ids.shape[-1], device=segment_ids.device).expand_as(segment_ids)
    return index - (index * _run_starts(segment_ids)).cummax(-1).values


def by_segment(values: torch.Tensor, segment_ids: torch.Tensor) -> torch.Tensor:
    """(batch, length, ...) values of packed rows -> (records, longest record, ...): one record a row, right-padded
    with zeros (False), records in row order and, within a row, in the order of their runs; differentiable."""
    real = segment_ids != 0
    starts = _run_starts(segment_ids) & real
    record = starts.flatten().cumsum(0).view_as(segment_ids)[real] - 1
    position = segment_positions(segment_ids)[real]
    records = int(starts.sum())
    longest = int(position.max()) + 1 if records else 0
    out = values.new_zeros((records, longest, *values.shape[2:]))
    out[record, position] = values[real]
    return out


def segment_runs(segment_ids: torch.Tensor) -> tuple[list[int], list[int]]:
    """Each record's (run of a nonzero id's) first token, as an index into the flattened (batch x length) ids, and its
    length, in row order."""
    starts = _run_starts(segment_ids).reshape(-1).nonzero().squeeze(1)  # every run's, padding's too
    lengths = torch.diff(starts, append=starts.new_tensor([segment_ids.numel()]))
    records = segment_ids.reshape(-1)[starts] != 0
    return starts[records].tolist(), lengths[records].tolist()


def _run_starts(segment_ids: torch.Tensor) -> torch.Tensor:
    """True where a run of equal ids starts (the first token of every row too)."""
    starts = torch.ones_like(segment_ids, dtype=torch.bool)
    starts[:, 1:] = segment_ids[:, 1:] != segment_ids[:, :-1]
    return starts
