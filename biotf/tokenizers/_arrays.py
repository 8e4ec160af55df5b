"""Numpy helpers shared by the character-table tokenizers (amino acids, k-mers, SMILES).

The fast paths encode a whole batch at once: the texts are joined into one code array, every
character is mapped through a 128-entry table (its policy already applied as the table entry),
and the result is cut back into one id array per text. Errors are found after the fact from the
flat index of the first refused character, so the fast path pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from biotf.errors import TokenizationError

# Codes >= 128 (any non-ASCII character) are clipped to this code; tables give it the "unknown" entry.
NON_ASCII = 128
TABLE_SIZE = 129


def join_codes(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """All texts as one array of character codes, and `starts` (len(texts) + 1 offsets).

    ASCII batches (the normal case) cost one `encode`; others go through UTF-32 so that
    positions stay character positions, with every non-ASCII code clipped to `NON_ASCII`.
    """
    joined = "".join(texts)
    starts = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in texts], out=starts[1:])
    if joined.isascii():
        return np.frombuffer(joined.encode("ascii"), dtype=np.uint8), starts
    codes = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32)
    return np.minimum(codes, NON_ASCII).astype(np.uint8), starts


def locate(flat_index: int, starts: np.ndarray) -> tuple[int, int]:
    """(text number, position in that text) of an index into the joined batch."""
    item = int(np.searchsorted(starts, flat_index, side="right")) - 1
    return item, int(flat_index - starts[item])


def record_name(records: Sequence[str] | None, item: int) -> str | None:
    return None if records is None else str(records[item])


def refuse(texts: Sequence[str], records: Sequence[str] | None, starts: np.ndarray, flat_index: int,
           detail: str) -> TokenizationError:
    """The TokenizationError for the character at `flat_index` of the joined batch."""
    item, position = locate(flat_index, starts)
    if records is None and len(texts) > 1:
        detail = f"{detail} (batch item {item})"
    return TokenizationError(texts[item][position], position, record=record_name(records, item), detail=detail)


def count_codes(codes: np.ndarray) -> np.ndarray:
    """How often each code occurs (length TABLE_SIZE); policies turn these into PolicyStats."""
    return np.bincount(codes, minlength=TABLE_SIZE)


def assemble(content: np.ndarray, counts: np.ndarray, prefix: int | None, suffix: int | None) -> list[np.ndarray]:
    """Cut the flat content ids into one int32 array per text, adding `prefix` / `suffix` ids around each."""
    counts = np.asarray(counts, dtype=np.int64)
    n = len(counts)
    extra = (prefix is not None) + (suffix is not None)
    lengths = counts + extra
    out_starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=out_starts[1:])
    out = np.empty(int(out_starts[-1]), dtype=np.int32)
    if extra:
        is_content = np.ones(len(out), dtype=bool)
        if prefix is not None:
            out[out_starts[:-1]] = prefix
            is_content[out_starts[:-1]] = False
        if suffix is not None:
            out[out_starts[1:] - 1] = suffix
            is_content[out_starts[1:] - 1] = False
        out[is_content] = content
    else:
        out[:] = content
    return np.split(out, out_starts[1:-1]) if n else []


class CharTable:
    """A character policy as data: per code, the value it maps to (or `REFUSED`), why it is refused,
    and which PolicyStats counters it increments. Schemes fill one at construction."""

    REFUSED = -1

    def __init__(self) -> None:
        self.values = np.full(TABLE_SIZE, self.REFUSED, dtype=np.int32)
        self.reasons: dict[int, str] = {}
        self.counted: dict[str, np.ndarray] = {}

    def set(self, chars: str | list[int], value: int, *stats: str) -> None:
        for code in map(ord, chars) if isinstance(chars, str) else chars:
            self.values[code] = value
            self.reasons.pop(code, None)
            for stat in stats:
                self.counted.setdefault(stat, np.zeros(TABLE_SIZE, dtype=bool))[code] = True

    def refuse(self, chars: str | list[int], reason: str) -> None:
        for code in map(ord, chars) if isinstance(chars, str) else chars:
            self.values[code] = self.REFUSED
            self.reasons[code] = reason
            for counted in self.counted.values():
                counted[code] = False

    def is_set(self, code: int) -> bool:
        return bool(self.values[code] != self.REFUSED or code in self.reasons)

    def unset_codes(self) -> list[int]:
        return [code for code in range(TABLE_SIZE) if not self.is_set(code)]

    def reason(self, code: int) -> str:
        return self.reasons.get(int(code), "")

    def add_stats(self, codes: np.ndarray, stats) -> None:
        """Add to `stats` how many of `codes` each policy changed."""
        if stats is None or not len(codes) or not self.counted:
            return
        histogram = count_codes(codes)
        for stat, counted in self.counted.items():
            if changed := int(histogram[counted].sum()):
                stats[stat] += changed
