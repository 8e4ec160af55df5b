"""Numpy helpers shared by the character-table tokenizers (amino acids, k-mers, SMILES).

The fast paths encode a whole batch at once: the texts are joined into one code array, every
character is mapped through a 128-entry table (its policy already applied as the table entry),
and the result is cut back into one id array per text. Errors are found after the fact from the
flat index of the first refused character, so the fast path pays nothing for them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from biotf.errors import TokenizationError

# Codes >= 128 (any non-ASCII character) are clipped to this code; tables give it the "unknown" entry.
NON_ASCII = 128
TABLE_SIZE = 129


def text_starts(texts: Sequence[str]) -> np.ndarray:
    """Offsets of each text in the joined batch, plus the total length (len(texts) + 1 values)."""
    starts = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, texts), dtype=np.int64, count=len(texts)), out=starts[1:])
    return starts


def codes_of(joined: str) -> np.ndarray:
    """Character codes of `joined`: its bytes when ASCII (the normal case, one `encode`), else
    through UTF-32 so that positions stay character positions, every non-ASCII code clipped to `NON_ASCII`.
    Lone surrogates (what `surrogateescape` makes of undecodable bytes) pass through as their code
    points, so the unknown policy decides them like any other non-ASCII character."""
    if joined.isascii():
        return np.frombuffer(joined.encode("ascii"), dtype=np.uint8)
    codes = np.frombuffer(joined.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    return np.minimum(codes, NON_ASCII).astype(np.uint8)


def span_positions(span_starts: np.ndarray, span_lengths: np.ndarray) -> np.ndarray:
    """Every position covered by the spans [start, start + length), concatenated (no full-length pass)."""
    span_lengths = np.asarray(span_lengths, dtype=np.int64)
    shift = np.asarray(span_starts, dtype=np.int64) - np.cumsum(span_lengths) + span_lengths
    return np.arange(int(span_lengths.sum())) + np.repeat(shift, span_lengths)


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
    return cut(*assemble_flat(content, counts, prefix, suffix))


def assemble_flat(content: np.ndarray, counts: np.ndarray, prefix: int | None,
                  suffix: int | None) -> tuple[np.ndarray, np.ndarray]:
    """`assemble`'s arrays still joined: one int32 array, and each text's number of ids."""
    counts = np.asarray(counts, dtype=np.int64)
    extra = (prefix is not None) + (suffix is not None)
    lengths = counts + extra
    out_starts = np.zeros(len(counts) + 1, dtype=np.int64)
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
    return out, lengths


def cut(flat: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    """`flat` cut into consecutive arrays of `lengths`: views (np.split is 10x slower here)."""
    bounds = [0, *np.cumsum(lengths).tolist()]
    return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


class Lookup(NamedTuple):
    """A batch after `CharTable.lookup`: everything is indexed by position in the joined text."""

    values: np.ndarray  # table value per character (may be a read-only view)
    codes: np.ndarray  # character code per character (non-ASCII clipped to NON_ASCII)
    starts: np.ndarray  # text_starts of the batch
    any_refused: bool
    joined: str


class CharTable:
    """A character policy as data: per code, the value it maps to (or `REFUSED`), why it is refused,
    and which PolicyStats counters it increments. Schemes fill one at construction, then `lookup`."""

    REFUSED = -1

    def __init__(self) -> None:
        self.values = np.full(TABLE_SIZE, self.REFUSED, dtype=np.int32)
        self.reasons: dict[int, str] = {}
        self.counted: dict[str, np.ndarray] = {}
        self._compact: tuple[np.ndarray, bytes | None, int] | None = None

    def set(self, chars: str | list[int], value: int, *stats: str) -> None:
        for code in map(ord, chars) if isinstance(chars, str) else chars:
            self.values[code] = value
            self.reasons.pop(code, None)
            for stat in stats:
                self.counted.setdefault(stat, np.zeros(TABLE_SIZE, dtype=bool))[code] = True
        self._compact = None

    def refuse(self, chars: str | list[int], reason: str) -> None:
        for code in map(ord, chars) if isinstance(chars, str) else chars:
            self.values[code] = self.REFUSED
            self.reasons[code] = reason
            for counted in self.counted.values():
                counted[code] = False
        self._compact = None

    def is_set(self, code: int) -> bool:
        return bool(self.values[code] != self.REFUSED or code in self.reasons)

    def unset_codes(self) -> list[int]:
        return [code for code in range(TABLE_SIZE) if not self.is_set(code)]

    def reason(self, code: int) -> str:
        return self.reasons.get(int(code), "")

    def fold_lowercase(self, letters: str, fold: bool, reason: str) -> None:
        """Lowercase `letters`: the entry of their uppercase letter (counted as lowercase_folded plus
        that letter's own stats; refused where it is) when `fold`, else refused with `reason`."""
        for upper in map(ord, letters):
            lower = ord(chr(upper).lower())
            if not fold:
                self.refuse([lower], reason)
            elif upper in self.reasons:
                self.refuse([lower], self.reasons[upper])
            else:
                self.set([lower], int(self.values[upper]), "lowercase_folded",
                         *[stat for stat, counted in self.counted.items() if counted[upper]])

    def fill_unknown(self, value: int | None, reason: str) -> None:
        """Every code not set yet: `value` (counted as unknown_to_unk), or refused with `reason` when None."""
        if value is None:
            self.refuse(self.unset_codes(), reason)
        else:
            self.set(self.unset_codes(), value, "unknown_to_unk")

    @property
    def refused_value(self) -> int:
        """How `lookup` marks a refused character (255 when values fit in a byte, else -1)."""
        return self._compacted()[2]

    def _compacted(self) -> tuple[np.ndarray, bytes | None, int]:
        """Values as uint8 (255 = refused) when they fit, plus a `bytes.translate` table for ASCII input."""
        if self._compact is None:
            if self.values.max() < 255:
                small = np.where(self.values == self.REFUSED, 255, self.values).astype(np.uint8)
                translate = bytes(small[:128].tolist()) + bytes([int(small[NON_ASCII])]) * 128
                self._compact = (small, translate, 255)
            else:
                self._compact = (self.values, None, self.REFUSED)
        return self._compact

    def lookup(self, texts: Sequence[str]) -> Lookup:
        """Table values of every character of the joined batch.

        ASCII batches with byte-sized values take `bytes.translate`, several times faster than
        numpy fancy indexing; the arrays may then be read-only views of the translated bytes.
        """
        values_table, translate, refused_value = self._compacted()
        joined = "".join(texts)
        starts = text_starts(texts)
        if translate is not None and joined.isascii():
            encoded = joined.encode("ascii")
            translated = encoded.translate(translate)
            values = np.frombuffer(translated, dtype=np.uint8)
            return Lookup(values, np.frombuffer(encoded, dtype=np.uint8), starts, b"\xff" in translated, joined)
        codes = codes_of(joined)
        values = values_table[codes]
        return Lookup(values, codes, starts, bool((values == refused_value).any()), joined)

    def add_stats(self, codes: np.ndarray, stats) -> None:
        """Add to `stats` how many of `codes` each policy changed."""
        if stats is None or not len(codes) or not self.counted:
            return
        # Usually no character was changed: one bytes.translate finds that out without a histogram.
        changed_any = np.zeros(256, dtype=np.uint8)
        for counted in self.counted.values():
            changed_any[:TABLE_SIZE] |= counted
        flags = codes.tobytes().translate(changed_any.tobytes())
        if b"\x01" not in flags:
            return
        histogram = count_codes(codes[np.frombuffer(flags, dtype=np.bool_)])
        for stat, counted in self.counted.items():
            if changed := int(histogram[counted].sum()):
                stats[stat] += changed
