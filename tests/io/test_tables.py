"""`biotf.io.tables`: delimited rows quoted as CSV quotes them, tables that read back as written in every format
(floats to the last bit, a table without rows still a table), all or nothing."""

from __future__ import annotations

import csv

import pandas as pd
import pytest

from biotf.errors import InputError
from biotf.io.tables import TABLE_FORMATS, write_rows, write_table

ROWS = [{"id": "p1", "score": 0.1 + 0.2, "hits": 3, "note": 'a "quoted", tabbed\tfield'},
        {"id": "p2", "score": -1e-300, "hits": 0, "note": "two\nlines"}]


def test_rows_holding_the_delimiter_a_line_break_or_a_quote_read_back_through_csv(tmp_path):
    rows = [["a\tb", 'say "x"', "line\nbreak"], ["plain", "", "é"]]
    path = write_rows(tmp_path / "rows.tsv", ["first", "second", "third"], iter(rows))
    with open(path, newline="", encoding="utf-8") as handle:
        assert list(csv.reader(handle, delimiter="\t")) == [["first", "second", "third"], *rows]
    assert path.read_text(encoding="utf-8").startswith("first\tsecond\tthird\n")


@pytest.mark.parametrize("suffix", TABLE_FORMATS)
def test_a_table_reads_back_as_written(tmp_path, suffix):
    path = write_table(tmp_path / f"table{suffix}", ROWS)
    if suffix == ".parquet":
        read = pd.read_parquet(path)
    else:
        read = pd.read_csv(path, sep="\t" if suffix == ".tsv" else ",", float_precision="round_trip")
    assert read.columns.tolist() == ["id", "score", "hits", "note"]
    assert read.to_dict("records") == ROWS  # floats at full precision: 0.1 + 0.2 is not 0.3
    assert [p.name for p in tmp_path.iterdir()] == [f"table{suffix}"]  # atomic: no work file left


def test_delimited_tables_end_lines_as_rfc_4180(tmp_path):
    path = write_table(tmp_path / "table.csv", [{"a": 1, "b": 2}])
    assert path.read_bytes() == b"a,b\r\n1,2\r\n"


@pytest.mark.parametrize("suffix", TABLE_FORMATS)
def test_a_table_without_rows_keeps_its_named_columns(tmp_path, suffix):
    path = write_table(tmp_path / f"empty{suffix}", [], columns=["query", "hit", "distance"])
    read = pd.read_parquet(path) if suffix == ".parquet" else pd.read_csv(path, sep="\t" if suffix == ".tsv" else ",")
    assert read.columns.tolist() == ["query", "hit", "distance"] and len(read) == 0


def test_a_table_without_rows_or_columns_and_an_unknown_extension_are_refused(tmp_path):
    with pytest.raises(ValueError, match="a table without rows needs its columns named"):
        write_table(tmp_path / "empty.csv", [])
    with pytest.raises(InputError, match=r"unsupported extension '\.xlsx' \(allowed: \.csv, \.tsv, \.parquet\)"):
        write_table(tmp_path / "table.xlsx", ROWS)
    assert list(tmp_path.iterdir()) == []
