"""The files `biotf contacts` writes, chosen by the output's extension; each is written as the maps arrive (one
protein's map in memory at a time) into a temporary that becomes the output only when complete (`atomic_write`).

- `.npz`: `ids` and `sequences` (unicode arrays, in input order) and one (L, L) float32 map per protein under
  `contacts/<id>` (`np.load(path)["contacts/P69905"]`); residue i of the sequence is row and column i - 1. Two ids
  whose maps np.load could not tell apart (`a` and `a.npy`: `NpzNames`) are refused before the model runs.
- `.tsv`: a long table `id, i, j, probability`, every pair i < j of every protein, residues numbered from 1.
- `.rr`: CASP's RR format, one `PFRMAT RR` ... `END` block per protein: its sequence (50 residues a line), then
  `i j 0 8 probability` for every pair i < j (1-based), most probable first (d1 = 0, d2 = 8 angstrom: the contact
  definition of the maps).
Every pair is written: nothing is thresholded or cut.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from biotf.io.readers import Record
from biotf.io.npz import NpzNames

CONTACT_FORMATS = (".npz", ".tsv", ".rr")
RR_LINE = 50  # residues per sequence line of an RR block
Maps = Iterable[tuple[Record, np.ndarray]]


def check_ids(fmt: str, records: Iterable[Record]) -> None:
    """Refuse two ids whose maps would be one array of the .npz (`NpzNames`), naming both records."""
    if fmt == ".npz":
        names = NpzNames("rename one of them, or write .tsv or .rr")
        for record in records:
            names.add(f"record {record.id!r} (record {record.index + 1})", f"contacts/{record.id}")


def _upper_pairs(length: int) -> tuple[np.ndarray, np.ndarray]:
    """0-based (i, j) of every pair i < j, row by row."""
    return np.triu_indices(length, k=1)


def write_npz(path: Path, maps: Maps) -> None:
    ids: list[str] = []
    sequences: list[str] = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for record, probabilities in maps:
            with archive.open(f"contacts/{record.id}.npy", "w", force_zip64=True) as entry:
                np.lib.format.write_array(entry, probabilities.astype(np.float32), allow_pickle=False)
            ids.append(record.id)
            sequences.append(record.sequence)
        for name, values in (("ids", ids), ("sequences", sequences)):
            with archive.open(f"{name}.npy", "w", force_zip64=True) as entry:
                np.lib.format.write_array(entry, np.array(values, dtype=str), allow_pickle=False)


def write_tsv(path: Path, maps: Maps) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        out.write("id\ti\tj\tprobability\n")
        for record, probabilities in maps:
            rows, columns = _upper_pairs(len(probabilities))
            values = probabilities[rows, columns]
            out.writelines(f"{record.id}\t{i + 1}\t{j + 1}\t{p:.6g}\n" for i, j, p in zip(rows, columns, values))


def write_rr(path: Path, maps: Maps) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        for record, probabilities in maps:
            rows, columns = _upper_pairs(len(probabilities))
            values = probabilities[rows, columns]
            order = np.argsort(-values, kind="stable")
            sequence = record.sequence
            out.write(f"PFRMAT RR\nTARGET {record.id}\nMETHOD biotf contacts (attention contact head)\nMODEL 1\n")
            out.writelines(sequence[at:at + RR_LINE] + "\n" for at in range(0, len(sequence), RR_LINE))
            out.writelines(f"{rows[k] + 1} {columns[k] + 1} 0 8 {values[k]:.6f}\n" for k in order)
            out.write("END\n")


WRITERS: dict[str, Callable[[Path, Maps], None]] = {".npz": write_npz, ".tsv": write_tsv, ".rr": write_rr}
