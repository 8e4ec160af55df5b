"""Tables on disk: rows of named columns as .csv, .tsv or .parquet, chosen by the output's extension
(`biotf score`, `biotf search query`)."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path

from biotf.io.atomic import atomic_write
from biotf.io.outputs import output_format

TABLE_FORMATS = (".csv", ".tsv", ".parquet")  # output tables, by extension


def write_table(path: str | Path, rows: list[dict[str, object]], columns: Sequence[str] | None = None) -> Path:
    """Rows of equal keys as .csv / .tsv (floats at full precision) or .parquet, atomically. The header (the
    parquet schema) is always written, so a table without rows still reads as one: `columns` names it when `rows`
    may be empty (a query without hits); by default the first row's keys."""
    suffix = output_format(path, TABLE_FORMATS)
    names = list(rows[0]) if rows else list(columns or [])
    if not names:
        raise ValueError(f"{path}: a table without rows needs its columns named")

    def write(temporary: Path) -> None:
        if suffix == ".parquet":
            import pyarrow as pa
            import pyarrow.parquet as pq

            pq.write_table(pa.table({name: [row[name] for row in rows] for name in names}), temporary)
            return
        with open(temporary, "w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle, delimiter="\t" if suffix == ".tsv" else ",")
            writer.writerow(names)
            writer.writerows([row[name] for name in names] for row in rows)

    return atomic_write(path, write)
