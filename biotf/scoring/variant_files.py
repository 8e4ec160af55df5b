"""Variant files: every layout users have, read with biotf's readers into (Record, Variant) pairs.

- CSV/TSV with a mutation column (`mutant`, `mutation`, `mutations` or `variant`, or `mutation_column`):
  substitution codes `A42G:K50R`, the ProteinGym / fair-esm layout; every other column is kept as metadata.
- CSV/TSV with `pos`, `ref`, `alt` columns (DNA SNVs and short indels, VCF-like alleles).
- Text: one variant a line, a code (`A42G:K50R`) or `pos ref alt` separated by whitespace.
- FASTA/GenBank: whole variant sequences, as long as the reference; the variant is their difference.
The reference is a sequence given apart (`read_reference`: a file with one record, or a literal sequence).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

from biotf.io.readers import Record, ReaderOptions, detect_format, read_records, table_columns
from biotf.errors import InputError
from biotf.scoring.mutations import Variant, difference, make_variant, parse_code, parse_pos_ref_alt
from biotf.tokenizers.base import PolicyStats
from biotf.conventions import counted
from biotf.naming import parameter

MUTATION_COLUMNS = ("mutant", "mutation", "mutations", "variant")
POSITION_COLUMNS = ("pos", "position")
_SEQUENCE = re.compile(r"[A-Za-z*.-]+")


@dataclass(frozen=True)
class Reference:
    """The sequence variants are scored against: `name` its record id, `path` the file it came from (None for
    a literal sequence given on the command line)."""

    name: str
    sequence: str
    path: Path | None = None

    def describe(self) -> str:
        """Which was taken, for the run summary: `file wt.fa (record P62593, 286 residues)`."""
        residues = counted(len(self.sequence), "residue")
        return f"literal sequence ({residues})" if self.path is None else \
            f"file {self.path} (record {self.name}, {residues})"


def looks_like_a_path(text: str) -> bool:
    """A path separator or a file extension (`wt.fa`, `ref.fasta.gz`): what a sequence of letters never has."""
    return "/" in text or os.sep in text or bool(Path(text).suffix)


def read_reference(text: str, stats: PolicyStats | None = None) -> Reference:
    """`--reference`: a file holding exactly one record (its reader's policies counted in `stats`), or the
    sequence itself. An argument that looks like a path is never taken for a sequence: if no such file
    exists, that is an error (`wt.fa` is not "WT.FA")."""
    path = Path(text)
    if path.is_file():
        records = list(read_records(path, stats=stats))
        if len(records) != 1:
            raise InputError(f"reference file {path}: {counted(len(records), 'record')}, expected exactly one")
        return Reference(records[0].id, records[0].sequence, path)
    if looks_like_a_path(text):
        what = "is not a file" if path.exists() else "does not exist"
        raise InputError(f"reference file {path} {what} (a literal reference sequence has no '/' and no "
                         "'.<extension>')")
    if not _SEQUENCE.fullmatch(text):
        raise InputError(f"reference {text[:40]!r} is neither an existing file nor a sequence of letters")
    return Reference("reference", text)


def _find(names: list[str], candidates: tuple[str, ...]) -> str | None:
    lowered = {name.lower(): name for name in names}
    return next((lowered[c] for c in candidates if c in lowered), None)


def read_variants(path: str | Path, reference: str, offset: int = 1, options: ReaderOptions = ReaderOptions(),
                  mutation_column: str | None = None, stats: PolicyStats | None = None
                  ) -> list[tuple[Record, Variant]]:
    """Every variant of `path`, checked against `reference` (a mismatch is an InputError naming it)."""
    path = Path(path)
    fmt = detect_format(path, options.format)
    if fmt in ("fasta", "genbank"):
        return [(record, difference(reference, record.sequence, record.id))
                for record in read_records(path, options, stats)]
    if fmt in ("csv", "tsv"):
        names = table_columns(path, options)
        column = mutation_column or _find(names, MUTATION_COLUMNS)
        if column is not None:
            return [(record, make_variant(reference, parse_code(record.sequence, offset, _name(record)),
                                          _name(record), offset))
                    for record in read_records(path, replace(options, column=column), stats)]
        position, ref, alt = _find(names, POSITION_COLUMNS), _find(names, ("ref",)), _find(names, ("alt",))
        if None in (position, ref, alt):
            raise InputError(f"{path}: no mutation column ({', '.join(MUTATION_COLUMNS)}) and no pos, ref, alt "
                             f"columns; columns: {', '.join(names)} (name one with {parameter('mutation_column')})")
        pairs = []
        for record in read_records(path, replace(options, column=ref), stats):
            mutation = parse_pos_ref_alt(record.metadata[position], record.sequence, record.metadata[alt], offset,
                                         _name(record))
            pairs.append((record, make_variant(reference, [mutation], _name(record), offset)))
        return pairs
    if fmt != "text":
        raise InputError(f"{path}: variants come as CSV/TSV, text or FASTA/GenBank, not {fmt}")
    pairs = []
    for record in read_records(path, options, stats):
        fields = record.sequence.split()
        if len(fields) == 1:
            mutations = parse_code(fields[0], offset, record.id)
        elif len(fields) == 3:
            mutations = [parse_pos_ref_alt(*fields, offset=offset, name=record.id)]
        else:
            raise InputError(f"{path}: {record.id}: expected a code like A42G:K50R or 'pos ref alt', "
                             f"found {len(fields)} fields")
        pairs.append((record, make_variant(reference, mutations, record.id, offset)))
    return pairs


def _name(record: Record) -> str:
    """How errors name a table row: its id and 1-based data row."""
    return f"{record.id} (row {record.index + 1})"
