r"""Labels for probes and maps: a metadata column of an embedding file, optionally parsed by a regex
(`biotf.data.labels.parse_labels`).

    labels(table, "description", r"^(\S+?)-[MSU]\b")  # DeepLoc: "Cell.membrane-M test" -> "Cell.membrane"
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from biotf.data.labels import parse_labels
from biotf.errors import InputError
from biotf.conventions import listed
from biotf.naming import given

if TYPE_CHECKING:
    from biotf.io.embeddings import EmbeddingTable


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


def left_out_lines(heading: str, left_out: Mapping[str, int], unparsable: Sequence[str]) -> list[str]:
    """What a probe or a neighbour evaluation left out, as the lines it prints after its first: `heading` and the
    counts ("left out: 3 records without a label"), then the ids of the SMILES RDKit cannot parse."""
    lines = [heading + ", ".join(f"{count} {why}" for why, count in left_out.items())] if left_out else []
    if unparsable:
        lines.append(f"SMILES RDKit cannot parse ({given('invalid_smiles', 'skip')}): {listed(unparsable)}")
    return lines
