"""split.tsv: written by fine-tuning, read back by id (a resume's check, `biotf probe --split`)."""

from __future__ import annotations

import numpy as np
import pytest

from biotf.data.splits import read_sides, sides_of, write_split
from biotf.errors import InputError


def test_split_file_sides_are_read_by_id_and_ambiguous_ids_refused(tmp_path):
    path = tmp_path / "split.tsv"
    path.write_text("id\tsplit\tgroup\na\ttrain\t0\nb\ttest\t1\na\ttrain\t0\n")
    assert sides_of(path, ["b", "a", "c"]).tolist() == ["test", "train", ""]
    path.write_text("id\tsplit\tgroup\na\ttrain\t0\na\ttest\t1\n")
    with pytest.raises(InputError, match="id 'a' is on two sides"):
        sides_of(path, ["a"])


def test_a_written_split_reads_back(tmp_path):
    path = tmp_path / "split.tsv"
    write_split(path, ["a", "b", "c"], np.array(["train", "validation", "test"]), np.array([0, 1, 1]))
    assert read_sides(path) == {"a": "train", "b": "validation", "c": "test"}
    assert not list(tmp_path.glob(".*"))  # written atomically: no temporary left
