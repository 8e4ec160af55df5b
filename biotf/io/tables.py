"""Tables on disk, written all or nothing: `write_rows` (a header and rows as delimited text: `biotf predict`,
`biotf tokens`, `biotf contacts evaluate`, `biotf generate` samples and `generate evaluate` metrics) and
`write_table` (rows of named columns as .csv, .tsv or .parquet, chosen by the output's extension: `biotf score`,
`biotf search query`)."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from pathlib import Path

from biotf.io.atomic import atomic_write
from biotf.io.outputs import output_format

TABLE_FORMATS = (".csv", ".tsv", ".parquet")  # output tables, by extension


def write_rows(path: str | Path, header: Sequence[object], rows: Iterable[Sequence[object]], delimiter: str = "\t",
               line_end: str = "\n") -> Path:
    """`header`, then `rows` (streamed), as delimited text, atomically; a field holding the delimiter, a line break or
    a quote is quoted as CSV quotes it."""
    def write(temporary: Path) -> None:
        with open(temporary, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle, delimiter=delimiter, lineterminator=line_end)
            writer.writerow(header)
            writer.writerows(rows)

    return atomic_write(path, write)


def write_table(path: str | Path, rows: list[dict[str, object]], columns: Sequence[str] | None = None) -> Path:
    """Rows of equal keys as .csv / .tsv (floats at full precision) or .parquet, atomically. The header (the
    parquet schema) is always written, so a table without rows still reads as one: `columns` names it when `rows`
    may be empty (a query without hits); by default the first row's keys."""
    suffix = output_format(path, TABLE_FORMATS)
    names = list(rows[0]) if rows else list(columns or [])
    if not names:
        raise ValueError(f"{path}: a table without rows needs its columns named")

    if suffix != ".parquet":  # lines end in "\r\n", csv's own (RFC 4180) line ending
        return write_rows(path, names, ([row[name] for name in names] for row in rows),
                          "\t" if suffix == ".tsv" else ",", "\r\n")

    def write(temporary: Path) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({name: [row[name] for row in rows] for name in names}), temporary)

    return atomic_write(path, write)
