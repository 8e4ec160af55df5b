r"""Labels for probes and maps: a metadata column of an embedding file, optionally parsed by a regex.

    labels(table, "description", r"^(\S+?)-[MSU]\b")  # DeepLoc: "Cell.membrane-M test" -> "Cell.membrane"
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

from biotf.errors import ConfigError, InputError

if TYPE_CHECKING:
    from biotf.export.writers import EmbeddingTable


def labels(table: EmbeddingTable, column: str, pattern: str | None = None) -> np.ndarray:
    """The column's values as strings; with `pattern`, its first group (or whole match) in each value."""
    if column == "id":
        values = table.ids.astype(str)
    elif column in table.metadata:
        values = table.metadata[column].astype(str)
    else:
        raise InputError(f"label column {column!r} not found in the embedding file "
                         f"(columns: {', '.join(['id', *table.metadata]) })")
    return parse_labels(table.ids, values, pattern, column)


def parse_labels(ids, values: np.ndarray, pattern: str | None, column: str, key: str = "--label-pattern") -> np.ndarray:
    """`values` as they are, or with `pattern` its first group (or whole match) in each; `key` names the option
    in errors."""
    if pattern is None:
        return values
    try:
        regex = re.compile(pattern)
    except re.error as error:
        raise ConfigError(key, pattern, reason=str(error)) from None
    parsed = []
    for record, value in zip(ids, values):
        match = regex.search(value)
        if match is None:
            raise InputError(f"record {str(record)!r}: {column} {str(value)!r} does not match {key} {pattern!r}")
        parsed.append(match.group(1) if regex.groups else match.group(0))
    return np.array(parsed, dtype=str)


def numeric(values: np.ndarray) -> np.ndarray | None:
    """The values as floats when every one parses as a number, else None."""
    try:
        return values.astype(np.float64)
    except ValueError:
        return None
