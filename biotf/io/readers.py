"""Streaming readers: every input format becomes an iterator of `Record`s, one at a time.

Formats: FASTA (`fasta.py`, records equal to Biopython's) and GenBank (Biopython), CSV/TSV (a sequence column,
an id column: the one named by `id_column`, else a column named `id` (any case), else the row number; every other
column carried as metadata), `.smi` (SMILES, then an optional name, per line) and plain text
(one record per line). gzip is detected from the file's magic bytes, so `x.fa.gz` and a gzipped
file without the suffix both work. The format comes from the extension (`.gz` ignored) unless
`ReaderOptions.format` overrides it.

A non-UTF-8 byte, a header without a sequence, a CSV row with the wrong number of fields or a
missing column is one `InputError` naming the file and the line or record.

Nothing is dropped silently: skipped blank lines (text, .smi, one-column CSV/TSV) and stripped CSV whitespace are counted in the
`PolicyStats` the caller passes in, and so are records whose id an earlier record already had
(`duplicate_ids`, counted once the last record is read, in bounded memory: `duplicates.py`): both are kept,
never merged. A leading UTF-8 byte-order mark is dropped (so it never
hides in a first id or column name) and counted as `byte_order_mark_stripped`. A FASTA id ends at the
first whitespace of any kind, as in Biopython.

`read_columns` gives the same records as runs of (ids, sequences) columns, without `Record` objects: the token
cache's lean path (FASTA parsed straight into columns a block at a time; `read_records` builds its records from
the same runs).
"""

from __future__ import annotations

import codecs
import csv
import gzip
import io
import zlib
from bisect import bisect_left
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import accumulate, count, islice
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, NamedTuple

from biotf.io.duplicates import DuplicateCounter
from biotf.errors import InputError, TokenizationError
from biotf.tokenizers.base import PolicyStats

FORMATS_BY_SUFFIX = {
    **dict.fromkeys([".fa", ".fasta", ".faa", ".fna", ".ffn", ".frn", ".fas", ".mpfa"], "fasta"),
    **dict.fromkeys([".gb", ".gbk", ".gbff", ".genbank"], "genbank"),
    ".csv": "csv",
    **dict.fromkeys([".tsv", ".tab"], "tsv"),
    **dict.fromkeys([".smi", ".smiles"], "smi"),
    **dict.fromkeys([".txt", ".text"], "text"),
}
INPUT_FORMATS = ("fasta", "genbank", "csv", "tsv", "smi", "text")
# Tried in this order when a CSV/TSV reader is given no sequence column.
DEFAULT_SEQUENCE_COLUMNS = ("sequence", "seq", "smiles", "text", "document")
# The record id when a CSV/TSV reader is given no id column (any case); without one, ids are row numbers.
DEFAULT_ID_COLUMN = "id"
GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True, slots=True)
class Record:
    """One input sequence: `index` is its 0-based position in the file, kept through every stage."""

    id: str
    sequence: str
    metadata: dict[str, str]
    index: int


@dataclass(frozen=True)
class ReaderOptions:
    """How to read a file. Plain fields so that it can live in a YAML config and in cache keys.

    format: one of INPUT_FORMATS, or None to take it from the extension.
    column / id_column: CSV/TSV column names (or 0-based indices as strings when `header` is False). Without
        `id_column`, a column named `id` (any case) holds the ids, else they are the row numbers 0, 1, ...
    header: whether a CSV/TSV file's first row names the columns.
    strip: remove whitespace around CSV/TSV fields (counted as `whitespace_stripped`).
    skip_blank_lines: text, .smi and one-column CSV/TSV files skip empty lines (counted as
        `blank_lines_skipped`) instead of failing on them (a blank line of a wider table lacks fields: refused).
    quoting: "minimal" (standard CSV quotes) or "none" (a quote is an ordinary character);
        None means "minimal" for CSV and "none" for TSV, which is unquoted by convention.
    keep_empty: a record with an empty sequence (a blank text line, an empty CSV field, a FASTA header without
        a sequence) is kept as a record with sequence "" instead of refused or skipped: a generated set's empty
        samples, which an evaluation counts as invalid molecules.
    """

    format: str | None = None
    column: str | None = None
    id_column: str | None = None
    header: bool = True
    strip: bool = True
    skip_blank_lines: bool = True
    quoting: str | None = None
    keep_empty: bool = False

    def as_key(self) -> dict:
        key = asdict(self)
        if not self.keep_empty:  # the token caches written before this option keep their key
            del key["keep_empty"]
        return key


def detect_format(path: Path, override: str | None = None) -> str:
    """The reader format for `path`: the override if given, else from the extension."""
    if override is not None:
        if override not in INPUT_FORMATS:
            raise InputError(f"unknown input format {override!r} for {path} (allowed: {', '.join(INPUT_FORMATS)})")
        return override
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    if suffixes and suffixes[-1] in FORMATS_BY_SUFFIX:
        return FORMATS_BY_SUFFIX[suffixes[-1]]
    raise InputError(f"cannot tell the format of {path} from its extension "
                     f"(known: {', '.join(sorted(FORMATS_BY_SUFFIX))}); give the format explicitly "
                     f"(allowed: {', '.join(INPUT_FORMATS)})")


def open_binary(path: str | Path) -> IO[bytes]:
    """Open `path` for reading bytes, decompressing gzip transparently; missing files are InputErrors."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"input file {path} does not exist")
    if not path.is_file():
        raise InputError(f"input {path} is not a file")
    handle = open(path, "rb")
    if handle.peek(2)[:2] == GZIP_MAGIC:  # opened again by name: a GzipFile closes the file it opened, not one given
        handle.close()
        return gzip.GzipFile(path, mode="rb")  # type: ignore[return-value]
    return handle


def _open_text(path: Path, errors: str = "strict") -> io.TextIOWrapper:
    """`path` as UTF-8 text with universal newlines (CRLF and CR-only files read like LF ones), iterated at C speed.
    A leading byte-order mark (Windows editors, Excel's "CSV UTF-8") is dropped by the utf-8-sig codec;
    `read_records` counts it. The text owns the file: closing it (its `with`) closes the file, so a reader stopped
    early closes it as it stops, and a text dropped unclosed never warns of an unclosed file."""
    return io.TextIOWrapper(open_binary(path), encoding="utf-8-sig", errors=errors, newline=None)


def _bad_utf8(path: Path) -> str:
    """Where the first non-UTF-8 byte is: found by a second pass, since errors are rare and the fast path
    (a TextIOWrapper) does not count lines."""
    with open_binary(path) as handle:
        for number, raw in enumerate(handle, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as error:
                return f"line {number}: not UTF-8 text (byte 0x{raw[error.start:error.start + 1].hex()} at column {error.start + 1})"
    return "not UTF-8 text"  # not reached in practice: every invalid byte lies on some line


def _header_line(path: Path, index: int) -> int | None:
    """1-based line of the FASTA header of record `index` (a second pass, used only for error messages),
    counted with the same newlines and BOM handling as the reader; None if the file changed meanwhile."""
    with _open_text(path, errors="replace") as lines:
        headers = (number for number, text in enumerate(lines, 1) if text.startswith(">"))
        return next(islice(headers, index, None), None)


def with_source(error: InputError, source: str | Path) -> InputError:
    """The same error, now naming the input file (tokenizers and per-record checks see texts, not the file they
    came from): a TokenizationError gains its `source`, any other InputError a `<file>: ` prefix."""
    if not isinstance(error, TokenizationError):
        return InputError(f"{source}: {error}")
    if error.source is not None:
        return error
    bare = str(TokenizationError(error.char, error.position, error.record))
    detail = str(error)[len(bare) + 2:] or None
    return TokenizationError(error.char, error.position, error.record, detail=detail, source=str(source))


@contextmanager
def _read_errors(path: Path) -> Iterator[None]:
    """Bytes that are not UTF-8, damaged gzip and failing reads, as one-line InputErrors naming `path`."""
    try:
        yield
    except UnicodeDecodeError:
        raise InputError(f"{path}: {_bad_utf8(path)}") from None
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise InputError(f"{path}: damaged or truncated compressed file ({error})") from None
    except OSError as error:
        raise InputError(f"{path}: cannot be read ({error})") from None


class RecordColumns(NamedTuple):
    """Consecutive records of a file as columns, without `Record` objects or metadata (the token cache's lean path):
    record `first + i` of the file has id `ids[i]` and sequence `sequences[i]`."""

    first: int
    ids: list[str]
    sequences: list[str]


def read_records(path: str | Path, options: ReaderOptions | None = None,
                 stats: PolicyStats | None = None) -> Iterator[Record]:
    """Stream the records of `path`; raises InputError for an unreadable, empty or malformed file."""
    path, options, stats, fmt = _reader_arguments(path, options, stats)
    if fmt == "fasta":
        for run, descriptions in _fasta_columns(path, options, stats):
            for index, identifier, sequence, description in zip(count(run.first), run.ids, run.sequences,
                                                                 descriptions):
                yield Record(identifier, sequence, {"description": description.strip()}, index)
        return
    reader = {"genbank": _read_genbank, "csv": _read_table, "tsv": _read_table, "smi": _read_smi,
              "text": _read_text}[fmt]
    with _reading(path, fmt, stats) as (text, ids):
        for record in reader(text, path, options, stats, fmt):
            ids.add(hash(record.id))
            yield record


def read_columns(path: str | Path, options: ReaderOptions | None = None, stats: PolicyStats | None = None,
                 characters: int = 1 << 20) -> Iterator[RecordColumns]:
    """The records of `read_records`, with the same policies, counts and errors, as columns in runs that close at
    the first record that brings them to `characters` sequence characters (the last run may hold fewer). FASTA is
    parsed straight into columns, a block of text at a time; other formats are gathered from `read_records`.
    Each run is yielded as soon as it closes, and the last one once the reader has finished (its counts taken), so
    `stats` fills in the order that a loop over `read_records` gives."""
    path, options, stats, fmt = _reader_arguments(path, options, stats)
    if fmt == "fasta":
        runs = (run for run, _ in _fasta_columns(path, options, stats))
    else:
        runs = (RecordColumns(r.index, [r.id], [r.sequence]) for r in read_records(path, options, stats))
    yield from _gathered(runs, characters)


def _gathered(runs: Iterator[RecordColumns], characters: int) -> Iterator[RecordColumns]:
    """The records of `runs` regrouped: a run closes at the first record that brings it to `characters` sequence
    characters or more (the last run may hold fewer), wherever the given runs were cut."""
    first, ids, sequences, size = 0, [], [], 0
    for run in runs:
        ends = list(accumulate(map(len, run.sequences)))
        start = 0
        while start < len(ends):
            before = ends[start - 1] if start else 0
            # the first record whose end reaches `characters` counting what is pending; past the run if none
            stop = bisect_left(ends, characters - size + before, start) + 1
            if not ids:
                first = run.first + start
            ids += run.ids[start:stop]
            sequences += run.sequences[start:stop]
            size += ends[min(stop, len(ends)) - 1] - before
            if size >= characters:
                yield RecordColumns(first, ids, sequences)
                ids, sequences, size = [], [], 0
            start = stop
    if ids:
        yield RecordColumns(first, ids, sequences)


def _reader_arguments(path: str | Path, options: ReaderOptions | None,
                      stats: PolicyStats | None) -> tuple[Path, ReaderOptions, PolicyStats, str]:
    """A reader's arguments with their defaults filled in, and the file's format."""
    path = Path(path)
    options = options or ReaderOptions()
    return path, options, stats if stats is not None else PolicyStats(), detect_format(path, options.format)


@contextmanager
def _reading(path: Path, fmt: str, stats: PolicyStats) -> Iterator[tuple[io.TextIOWrapper, DuplicateCounter]]:
    """The open file (`_open_text`: closed as the block ends, however it ends) and a counter that the reader adds
    every record's id to: read failures become InputErrors, a byte-order mark is counted, and once the last record is
    read, repeated ids are counted (in memory that does not grow with the file) and a file without records is
    refused."""
    ids = DuplicateCounter()
    try:
        with _open_text(path) as text, _read_errors(path):
            if text.buffer.peek(len(codecs.BOM_UTF8))[:len(codecs.BOM_UTF8)] == codecs.BOM_UTF8:
                stats["byte_order_mark_stripped"] += 1  # dropped by the codec; said, since it is a byte of the file
            yield text, ids
        if duplicates := ids.count():
            stats["duplicate_ids"] += duplicates
    finally:
        ids.close()
    if ids.added == 0:
        raise _no_records(path, fmt)


def _no_records(path: Path, fmt: str) -> InputError:
    """The error of a file that holds no record of format `fmt` (saying so when the file is empty)."""
    return InputError(f"{path}: no records found ({fmt} format{'; the file is empty' if path.stat().st_size == 0 else ''})")


def _fasta_columns(path: Path, options: ReaderOptions,
                   stats: PolicyStats) -> Iterator[tuple[RecordColumns, list[str]]]:
    """The FASTA records of `path` a block of text at a time, as columns with their descriptions, counted as
    `_reading` counts. A header without a sequence (unless `keep_empty`) is an InputError once the records before
    it are yielded."""
    from biotf.io.fasta import fasta_runs

    with _reading(path, "fasta", stats) as (stream, counter):
        for number, first in enumerate(stream, 1):
            if first.strip():
                break
        else:
            return
        if not first.startswith(">"):
            raise InputError(f"{path}: line {number}: expected a FASTA header starting with '>', "
                             f"found {first.strip()[:40]!r} (not a FASTA file? give the format explicitly)")
        index = 0
        for titles, sequences in fasta_runs(stream, first):
            ids, descriptions = [], []
            for title in titles:
                # the id ends at the first whitespace of any kind (tab included), as in Biopython's SeqIO
                parts = title.split(None, 1)
                ids.append(parts[0] if parts else "")
                descriptions.append(parts[1] if len(parts) == 2 else "")
            if not options.keep_empty and "" in sequences:
                at = sequences.index("")
                if at:
                    yield RecordColumns(index, ids[:at], sequences[:at]), descriptions[:at]
                line = _header_line(path, index + at)
                raise InputError(f"{path}: record {ids[at]!r}{f' (line {line})' if line else ''} "
                                 "has a header but no sequence")
            counter.add_ids(ids)
            yield RecordColumns(index, ids, sequences), descriptions
            index += len(ids)


def _genbank_entries(text: io.TextIOWrapper, path: Path) -> Iterator[tuple[int, object, str]]:
    """(index, Biopython SeqRecord, sequence) of each GenBank record; a record without a sequence or a file
    Biopython cannot parse is an InputError naming the file and the record."""
    from Bio import SeqIO
    from Bio.Seq import UndefinedSequenceError

    index = 0
    try:
        for index, entry in enumerate(SeqIO.parse(text, "genbank")):
            try:
                sequence = str(entry.seq)
            except UndefinedSequenceError:
                sequence = ""
            if not sequence:
                raise InputError(f"{path}: GenBank record {entry.id!r} (record {index + 1}) has no sequence (no ORIGIN)")
            yield index, entry, sequence
    except ValueError as error:
        if isinstance(error, (InputError, UnicodeDecodeError)):
            raise
        raise InputError(f"{path}: not a valid GenBank file near record {index + 1}: {error}") from None


def _genbank_record(index: int, entry, sequence: str) -> Record:
    metadata = {"description": entry.description}
    for key in ("organism", "molecule_type", "topology"):
        if key in entry.annotations:
            metadata[key] = str(entry.annotations[key])
    return Record(entry.id, sequence, metadata, index)


def _read_genbank(text: io.TextIOWrapper, path: Path, options: ReaderOptions, stats: PolicyStats,
                  fmt: str) -> Iterator[Record]:
    for index, entry, sequence in _genbank_entries(text, path):
        yield _genbank_record(index, entry, sequence)


def read_genbank_features(path: str | Path) -> Iterator[tuple[Record, list]]:
    """Each GenBank record of `path` with its Biopython `SeqFeature`s (what `read_records` leaves out): for tasks
    that label bases from the annotation. Same errors as `read_records`."""
    path = Path(path)
    count = 0
    with _open_text(path) as text, _read_errors(path):
        for index, entry, sequence in _genbank_entries(text, path):
            count += 1
            yield _genbank_record(index, entry, sequence), list(entry.features)
    if count == 0:
        raise _no_records(path, "genbank")


def _column_index(names: list[str], wanted: str | None, role: str, path: Path,
                  fallbacks: tuple[str, ...] = ()) -> int | None:
    """Position of column `wanted` (or of the first fallback present); InputError lists the columns."""
    if wanted is None:
        lowered = [n.lower() for n in names]
        for candidate in fallbacks:
            if candidate in lowered:
                return lowered.index(candidate)
        if not fallbacks:
            return None
        raise InputError(f"{path}: no {role} column given and none of {', '.join(fallbacks)} present; "
                         f"choose one of the columns: {', '.join(names)}")
    if wanted in names:
        return names.index(wanted)
    raise InputError(f"{path}: {role} column {wanted!r} not found; columns: {', '.join(names)}")


def _csv_reader(text: io.TextIOWrapper, path: Path, options: ReaderOptions, fmt: str):
    """A csv reader over the decoded rows of a CSV/TSV file (BOM dropped, any newline), with its quoting."""
    quoting_name = options.quoting or ("none" if fmt == "tsv" else "minimal")
    quoting = {"minimal": csv.QUOTE_MINIMAL, "none": csv.QUOTE_NONE}.get(quoting_name)
    if quoting is None:
        raise InputError(f"unknown CSV quoting {quoting_name!r} for {path} (allowed: minimal, none)")
    return csv.reader(text, delimiter="\t" if fmt == "tsv" else ",", quoting=quoting, strict=True)


def _column_names(first_row: list[str], header: bool) -> list[str]:
    """The names a table's columns go by: its first row, stripped, or "0", "1", ... without a header."""
    return [name.strip() for name in first_row] if header else [str(i) for i in range(len(first_row))]


def table_columns(path: str | Path, options: ReaderOptions | None = None) -> list[str]:
    """The column names of CSV/TSV file `path` exactly as `read_records` reads them (for callers that choose
    a column by its name before reading); [] for an empty file."""
    path = Path(path)
    options = options or ReaderOptions()
    fmt = detect_format(path, options.format)
    with _open_text(path) as text, _read_errors(path):
        reader = _csv_reader(text, path, options, fmt)
        try:
            return _column_names(next(reader, []), options.header)
        except csv.Error as error:
            raise InputError(f"{path}: line 1: malformed {fmt.upper()} ({error})") from None


def _read_table(text: io.TextIOWrapper, path: Path, options: ReaderOptions, stats: PolicyStats,
                fmt: str) -> Iterator[Record]:
    reader = _csv_reader(text, path, options, fmt)
    try:
        first_row = next(reader, None)
        if first_row is None:
            return
        names = _column_names(first_row, options.header)
        sequence_at = _column_index(names, options.column, "sequence", path, DEFAULT_SEQUENCE_COLUMNS)
        id_at = _column_index(names, options.id_column, "id", path)
        if id_at is None and options.header:  # one rule for every command: a column named `id` is the id
            id_at = next((i for i, name in enumerate(names) if name.lower() == DEFAULT_ID_COLUMN and i != sequence_at),
                         None)
        rows = reader if options.header else _chain_one(first_row, reader)
        index = -1
        for row in rows:
            line = reader.line_num
            if not row and len(names) == 1:  # a blank line of a one-column table: a text file's blank line
                if not _keep_blank(path, line, options, stats):
                    continue
                row = [""]
            index += 1
            if len(row) != len(names):
                if not row:
                    raise InputError(f"{path}: line {line}: empty row")
                raise InputError(f"{path}: line {line}: {len(row)} fields, expected {len(names)} ({', '.join(names)})")
            if options.strip:
                stripped = [value.strip() for value in row]
                changed = sum(a != b for a, b in zip(row, stripped))
                if changed:
                    stats["whitespace_stripped"] += changed
                row = stripped
            sequence = row[sequence_at]
            if not sequence and not options.keep_empty:
                raise InputError(f"{path}: line {line}: empty {names[sequence_at]!r} field")
            identifier = row[id_at] if id_at is not None else str(index)
            metadata = {name: value for i, (name, value) in enumerate(zip(names, row))
                        if i != sequence_at and i != id_at}
            yield Record(identifier, sequence, metadata, index)
    except csv.Error as error:
        raise InputError(f"{path}: line {reader.line_num}: malformed {fmt.upper()} ({error})") from None


def _chain_one(first: list[str], rest: Iterator[list[str]]) -> Iterator[list[str]]:
    yield first
    yield from rest


def _nonblank_lines(lines: io.TextIOWrapper, path: Path, options: ReaderOptions,
                    stats: PolicyStats) -> Iterator[tuple[int, str]]:
    """(line number, text without its newline) of every line, blank ones skipped and counted, refused, or kept as
    "" (`keep_empty`)."""
    for number, text in enumerate(lines, 1):
        text = text.rstrip("\n")
        if not text.strip():
            if _keep_blank(path, number, options, stats):
                yield number, ""
            continue
        yield number, text


def _keep_blank(path: Path, line: int, options: ReaderOptions, stats: PolicyStats) -> bool:
    """The rule for a blank line of a text, .smi or one-column CSV/TSV file: kept as an empty record
    (`keep_empty`), skipped and counted (`skip_blank_lines`), or refused."""
    if options.keep_empty:
        return True
    if not options.skip_blank_lines:
        raise InputError(f"{path}: line {line}: blank line (allow with skip_blank_lines)")
    stats["blank_lines_skipped"] += 1
    return False


def _read_text(lines: io.TextIOWrapper, path: Path, options: ReaderOptions, stats: PolicyStats,
               fmt: str) -> Iterator[Record]:
    for index, (line, text) in enumerate(_nonblank_lines(lines, path, options, stats)):
        yield Record(f"line{line}", text, {}, index)


def _read_smi(lines: io.TextIOWrapper, path: Path, options: ReaderOptions, stats: PolicyStats,
              fmt: str) -> Iterator[Record]:
    for index, (line, text) in enumerate(_nonblank_lines(lines, path, options, stats)):
        smiles, *name = text.split(None, 1) or [""]
        yield Record(name[0].strip() if name else f"line{line}", smiles, {}, index)

