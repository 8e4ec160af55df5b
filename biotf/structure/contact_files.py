"""Contact maps of every protein of a file, from a model with a contact head (`biotf.model.heads`).

    stats = predict_file("esm2_t6_8M_UR50D/", "proteins.fasta", "contacts.npz")

Every record is read and tokenised before the model runs, and refused in one line naming it where a map could not
mean what it says: a record without residues, one whose residues are not one token each (a map numbers residues,
so a tokenizer policy that drops or merges characters would shift every index), one longer than `max_length`
(special tokens included; never cut; by default the model's max_seq_len, longer where its positions extend:
`biotf.model.positions.reading_length`), and an id an earlier record has (maps are keyed by id).
Records then run in blocks of about `BLOCK_PAIRS` residue pairs, sorted by length within a block and batched to at
most `batch_pairs` padded (batch x T x T) positions, and leave in input order to the writer (`formats`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from biotf.analysis.plot import picture_paths, plot_contacts
from biotf.io.atomic import atomic_write
from biotf.io.outputs import output_format
from biotf.checkpoint.loading import LoadedModel, as_loaded
from biotf.io.readers import ReaderOptions, Record, read_records
from biotf.data.tokenize import content_start, encode_chunks, record_chunks
from biotf.errors import ConfigError, InputError, check_int
from biotf.model import Transformer
from biotf.model.heads import predict_contacts
from biotf.model.positions import reading_length
from biotf.progress import Progress, reporting
from biotf.structure.formats import CONTACT_FORMATS, WRITERS, check_ids
from biotf.tokenizers.base import PolicyStats, Tokenizer
from biotf.conventions import counted
from biotf.naming import parameter

ENCODE_RECORDS = 256  # tokenizers are vectorised: a few hundred records per call
BLOCK_PAIRS = 1 << 24  # residue pairs whose maps wait (float32) for their block to end: 64 MiB


@dataclass(frozen=True)
class ContactOptions:
    """`batch_pairs`: padded positions squared per forward (batch x T x T); attention memory grows with it, about
    heads x 16 bytes each while one layer's maps are reduced. `max_length`: the most tokens of a protein, special
    tokens included (default the model's max_seq_len; past it only where its positions extend, warned)."""

    batch_pairs: int = 1 << 20
    max_length: int | None = None

    def __post_init__(self) -> None:
        check_int("batch_pairs", self.batch_pairs)
        check_int("max_length", self.max_length, optional=True)


@dataclass
class ContactStats:
    """What a run did, for its summary line."""

    records: int = 0
    residues: int = 0
    batches: int = 0
    policies: PolicyStats = field(default_factory=PolicyStats)

    def summary(self) -> str:
        return (f"{counted(self.records, 'protein')}, {counted(self.residues, 'residue')}, {self.batches} model "
                f"batches; tokenizer policies: {self.policies.summary()}")


@dataclass(frozen=True)
class Protein:
    """One record tokenised: `ids` with its special tokens, residues at `ids[start:start + length]`."""

    record: Record
    ids: np.ndarray
    start: int
    length: int


def check_contact_head(model: Transformer, source: str | Path | None) -> None:
    if model.contact_head is None:
        raise ConfigError(parameter("model"), str(source or "(in memory)"),
                          reason="this model has no contact head (ESM-2 "
                          "checkpoints ship one, under contact_head.regression; any other model needs one fitted on "
                          "structures first)")


def proteins(records: Iterable[Record], tokenizer: Tokenizer, max_length: int | None, stats: PolicyStats,
             source: str | Path | None = None) -> list[Protein]:
    """Every record tokenised, or the one-line refusal of the first that cannot have a map (module docstring)."""
    found: list[Protein] = []
    seen: dict[str, int] = {}
    for chunk, encoded in encode_chunks(record_chunks(records, ENCODE_RECORDS), tokenizer, True, stats, source):
        contents = tokenizer.encode_batch([r.sequence for r in chunk], False, records=[r.id for r in chunk])
        for record, ids, content in zip(chunk, encoded, contents):
            where = f"record {record.id!r} (record {record.index + 1})"
            if record.id in seen:
                raise InputError(f"{where} has the id of record {seen[record.id] + 1}: contact maps are keyed by id, "
                                 "so ids must be unique")
            seen[record.id] = record.index
            if len(content) == 0:
                raise InputError(f"{where} has no residues")
            if len(content) != len(record.sequence):
                raise InputError(f"{where}: its {len(record.sequence)} characters are {len(content)} tokens; a contact "
                                 "map numbers residues, so each must be one token (see the tokenizer's policies)")
            if max_length is not None and len(ids) > max_length:
                raise InputError(f"{where} has {len(content)} residues, {len(ids)} tokens with special tokens: more "
                                 f"than max_length={max_length} (a map is never cut: split the record, or read further with "
                                 f"{parameter('max_length')} where the model's positions extend)")
            start = content_start(ids, content)
            if start is None:
                raise InputError(f"{where}: its residues' tokens do not appear unchanged among its tokens with special "
                                 "tokens, so a map could not number them")
            found.append(Protein(record, np.asarray(ids, np.int64), start, len(content)))
    return found


def _batches(block: list[Protein], batch_pairs: int) -> Iterator[list[Protein]]:
    """Longest first, each batch at most `batch_pairs` padded positions squared (one protein at least)."""
    batch: list[Protein] = []
    for protein in sorted(block, key=lambda p: -len(p.ids)):
        if batch and (len(batch) + 1) * len(batch[0].ids) ** 2 > batch_pairs:
            yield batch
            batch = []
        batch.append(protein)
    if batch:
        yield batch


def _blocks(found: list[Protein]) -> Iterator[list[Protein]]:
    block: list[Protein] = []
    pairs = 0
    for protein in found:
        block.append(protein)
        pairs += protein.length ** 2
        if pairs >= BLOCK_PAIRS:
            yield block
            block, pairs = [], 0
    if block:
        yield block


def _predict(model: Transformer, batch: list[Protein], pad_id: int) -> list[np.ndarray]:
    longest = max(len(p.ids) for p in batch)
    ids = torch.full((len(batch), longest), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    residues = torch.zeros_like(ids, dtype=torch.bool)
    for row, protein in enumerate(batch):
        ids[row, :len(protein.ids)] = torch.from_numpy(protein.ids)
        mask[row, :len(protein.ids)] = 1
        residues[row, protein.start:protein.start + protein.length] = True
    device = model.device
    maps = predict_contacts(model, ids.to(device), mask.to(device), residues.to(device))
    return [m.cpu().numpy() for m in maps]


def contact_maps(model: Transformer, found: list[Protein], pad_id: int, options: ContactOptions = ContactOptions(),
                 stats: ContactStats | None = None, progress: Progress | None = None
                 ) -> Iterator[tuple[Record, np.ndarray]]:
    """(record, (L, L) float32 probabilities) of every protein, in input order; `progress` counts residues."""
    stats = stats if stats is not None else ContactStats()
    for block in _blocks(found):
        maps: dict[int, np.ndarray] = {}
        for batch in _batches(block, options.batch_pairs):
            maps.update(zip((id(p) for p in batch), _predict(model, batch, pad_id)))
            stats.batches += 1
            if progress is not None:
                progress.update(sum(p.length for p in batch))
        for protein in block:
            stats.records += 1
            stats.residues += protein.length
            yield protein.record, maps.pop(id(protein))


def _drawn(maps: Iterator[tuple[Record, np.ndarray]], pictures: list[Path]) -> Iterator[tuple[Record, np.ndarray]]:
    """`maps` unchanged, each drawn into its picture as it passes."""
    for (record, probabilities), picture in zip(maps, pictures, strict=True):
        plot_contacts(picture, record.id, probabilities)
        yield record, probabilities


def predict_file(model: str | Path | LoadedModel, input_path: str | Path, output_path: str | Path,
                 options: ContactOptions = ContactOptions(), reader_options: ReaderOptions = ReaderOptions(),
                 device: str | None = None, plot: str | Path | None = None, overwrite: bool = False,
                 progress: bool = False) -> ContactStats:
    """Contact maps of every record of `input_path` into `output_path` (.npz, .tsv or .rr; `formats`) and, with
    `plot` (a directory), one PNG a record (`picture_paths`: `<id>.png`, an existing one replaced only with
    `overwrite`); returns the run's counts; `progress`: residues done, on stderr (`biotf.progress`). Every refusal
    comes before the model runs and the outputs are touched."""
    fmt = output_format(output_path, CONTACT_FORMATS)
    loaded = as_loaded(model, device)
    model, tokenizer = loaded.network, loaded.tokenizer
    check_contact_head(model, loaded.source)
    stats = ContactStats()
    found = proteins(read_records(input_path, reader_options, stats.policies), tokenizer,
                     reading_length(model.config, options.max_length), stats.policies, input_path)
    check_ids(fmt, (p.record for p in found))
    pictures = (picture_paths(plot, [p.record.id for p in found], [input_path], overwrite)
                if plot is not None else None)
    pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else 0  # padded positions are masked anyway

    def write(temporary: Path) -> None:
        with reporting(progress, f"contacts {Path(input_path).name}", "residues", model,
                       sum(p.length for p in found)) as shown:
            maps = contact_maps(model, found, pad_id, options, stats, shown)
            WRITERS[fmt](temporary, _drawn(maps, pictures) if pictures is not None else maps)

    atomic_write(output_path, write)
    return stats
