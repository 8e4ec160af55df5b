"""split.tsv: which side (train / validation / test) each labelled record of a fine-tuning run is on, and the group
that kept it there. Fine-tuning writes it; a resume checks against it; `biotf probe --split` scores on it."""

from __future__ import annotations

import csv
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from biotf.io.atomic import atomic_write_text
from biotf.errors import InputError

SPLIT_FILE = "split.tsv"


def write_split(path: Path, ids: list[str], sides: np.ndarray, groups: np.ndarray) -> None:
    """split.tsv, written atomically: each labelled record's side and the group that kept it there."""
    atomic_write_text(path, "id\tsplit\tgroup\n" + "".join(f"{i}\t{s}\t{g}\n" for i, s, g in zip(ids, sides, groups)))


def read_sides(path: Path) -> dict[str, str]:
    """id -> side of a split file (tab-separated columns id and split); an id on two sides is refused."""
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    if not rows or not {"id", "split"} <= set(rows[0]):
        raise InputError(f"{path}: not a split file (needs tab-separated columns id and split)")
    side: dict[str, str] = {}
    for row in rows:
        if side.setdefault(row["id"], row["split"]) != row["split"]:
            raise InputError(f"{path}: id {row['id']!r} is on two sides ({side[row['id']]}, {row['split']}); "
                             "records sharing an id cannot be told apart")
    return side


def sides_of(path: Path, ids: Iterable) -> np.ndarray:
    """The side of each of `ids` in split file `path`; "" for ids it lacks."""
    side = read_sides(path)
    return np.array([side.get(str(i), "") for i in ids], dtype=object).astype(str)
