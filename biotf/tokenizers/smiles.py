"""SMILES tokenizer: the atom-level regex of Schwaller et al. 2019, strict, with a learned vocabulary.

Pieces are exactly the matches of `SMILES_PATTERN` (the Molecular Transformer regex, with `>>?`
for the reaction arrow as in rxnfp): bracket atoms `[...]`, `Br`, `Cl`, organic and aromatic
atoms, bonds, branches, ring closures `0-9` and `%NN`, `.`, `>`/`>>`, `*`, `$`.

Strict round trip: for every accepted input `"".join(tokenize(s)) == s`. The reference regex
silently drops characters it cannot match (a space, `X`, a lone `%`, an unclosed `[`); here each is
a TokenizationError naming the record, position and character.

Vocabulary: specials 0 `<pad>`, 1 `<unk>`, 2 `<cls>`, 3 `<eos>`, 4 `<mask>`, then the base vocabulary
`smiles_vocabulary.txt` (written by scripts/smiles_vocabulary.py: every piece the regex makes outside
brackets, every element as a bracket atom, common charged, chiral and isotopic atoms, and every bracket
atom of 1.9M MOSES and MoleculeNet molecules), which is the whole vocabulary of `SmilesTokenizer()`.
`SmilesTokenizer.train(smiles, min_frequency=...)` adds the corpus's other pieces seen at least
`min_frequency` times, most frequent first (ties in code-point order); with `base_vocabulary=False` it
learns the corpus's pieces alone, most frequent first (what training did before the base existed). A
saved tokenizer stores its vocabulary, so its ids never depend on this file. `encode` adds `<cls>` ... `<eos>`.

Policies: `unknown` (a valid piece missing from the vocabulary, typically a rare bracket atom):
"error" (default) or "to_unk" (one `<unk>` per piece: a bracket atom such as `[13CH3]` is one piece and
becomes one `<unk>`, never cut into smaller pieces the regex does not make); `whitespace`
(leading/trailing, as in ESOL's 212 rows with a trailing space): "error" (default) or "strip".
Whitespace inside a SMILES is never valid and always an error.

Fast path: numpy over the whole batch. Single-character pieces come from a table; the few
multi-character ones are found with array arithmetic (`Br`, `Cl`, `%NN`, `>>`) and by pairing each
`]` with the first `[` after the previous `]` (bracket atoms, the only variable-length pieces,
are then looked up one by one).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from biotf.errors import ConfigError, check_choice, check_int
from biotf.tokenizers._arrays import TABLE_SIZE, codes_of, refuse, span_positions, text_starts
from biotf.tokenizers.base import PolicyStats, check_options, register_tokenizer
from biotf.tokenizers.vocabulary import VocabularyTokenizer

# Schwaller et al. 2019 (Molecular Transformer, ACS Cent. Sci. 5:1572), `>>?` as in rxnfp.
SMILES_PATTERN = (r"(\[[^\]]+]|Br?|Cl?|N|O|S|P|F|I|b|c|n|o|s|p|\(|\)|\.|=|#|-|\+|\\|\/|:|~|@|\?|>>?|\*|\$"
                  r"|\%[0-9]{2}|[0-9])")
SMILES_REGEX = re.compile(SMILES_PATTERN)
SINGLE_CHAR_PIECES = "BCNOSPFIbcnosp().=#-+\\/:~@?>*$0123456789"
# Every piece the regex can produce except bracket atoms and `%00`-`%09`: the start of the base vocabulary.
REGEX_TOKENS = (*SINGLE_CHAR_PIECES, "Br", "Cl", ">>", *(f"%{n}" for n in range(10, 100)))
SPECIAL_TOKENS = ("<pad>", "<unk>", "<cls>", "<eos>", "<mask>")
VOCABULARY_FILE = Path(__file__).with_name("smiles_vocabulary.txt")

UNKNOWN_POLICIES = ("error", "to_unk")
WHITESPACE_POLICIES = ("error", "strip")

_UNMATCHED = -1  # the regex matches nothing here: always an error
_UNSEEN = -2  # a valid piece missing from the vocabulary: the unknown policy decides


@cache
def base_tokens() -> tuple[str, ...]:
    """The pieces of `VOCABULARY_FILE` in order (lines starting with '# ' are its header; no piece holds a space)."""
    lines = VOCABULARY_FILE.read_text(encoding="utf-8").splitlines()
    return tuple(line for line in lines if line and not line.startswith("# "))


def _check_training(min_frequency: int = 1, base_vocabulary: bool = True) -> None:
    check_int("tokenizer.min_frequency", min_frequency)
    if not isinstance(base_vocabulary, bool):
        raise ConfigError("tokenizer.base_vocabulary", base_vocabulary, allowed="true or false")


def _pair_starts(first: np.ndarray, second: np.ndarray, same_text_next: np.ndarray) -> np.ndarray:
    """Positions p with first[p] and second[p+1] inside one text."""
    return first[:-1] & second[1:] & same_text_next


def pieces_per_text(piece_start: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Number of pieces in each text: its length minus its few non-start positions (piece interiors)."""
    interior = np.flatnonzero(~piece_start)
    text_of = np.searchsorted(starts, interior, side="right") - 1
    return np.diff(starts) - np.bincount(text_of, minlength=len(starts) - 1)


@register_tokenizer("smiles")
class SmilesTokenizer(VocabularyTokenizer):
    """Atom-level SMILES tokens (Schwaller et al. 2019 regex), strict round trip, base vocabulary extended by `train`."""

    policy_options = ("unknown", "whitespace")

    def __init__(self, vocab: Sequence[str] | None = None, unknown: str = "error", whitespace: str = "error"):
        check_choice("tokenizer.unknown", unknown, UNKNOWN_POLICIES)
        check_choice("tokenizer.whitespace", whitespace, WHITESPACE_POLICIES)
        self.unknown, self.whitespace = unknown, whitespace
        pieces = list(base_tokens() if vocab is None else vocab)
        for piece in pieces:
            if piece in SPECIAL_TOKENS:
                continue  # a saved vocabulary lists the specials first; they keep their ids
            if SMILES_REGEX.fullmatch(piece) is None:
                raise ConfigError("tokenizer.vocab", piece, reason="not a single piece of the SMILES regex")
        self._set_vocabulary([*SPECIAL_TOKENS, *(p for p in dict.fromkeys(pieces) if p not in SPECIAL_TOKENS)])
        self.pad_id, self.unk_id, self.cls_id, self.eos_id, self.mask_id = (self._vocab[t] for t in SPECIAL_TOKENS)
        self._unseen_id = self.unk_id if unknown == "to_unk" else _UNSEEN
        self._single = np.full(TABLE_SIZE, _UNMATCHED, dtype=np.int32)
        for char in SINGLE_CHAR_PIECES:
            self._single[ord(char)] = self._vocab.get(char, self._unseen_id)
        self._ring = np.array([self._vocab.get(f"%{n:02d}", self._unseen_id) for n in range(100)], dtype=np.int32)
        self._bromine, self._chlorine, self._arrow = (self._vocab.get(t, self._unseen_id) for t in ("Br", "Cl", ">>"))

    @classmethod
    def train(cls, smiles: Iterable[str], min_frequency: int = 1, base_vocabulary: bool = True,
              **options: Any) -> "SmilesTokenizer":
        """The base vocabulary, then every other piece of a corpus seen at least `min_frequency` times (most
        frequent first); `base_vocabulary=False`: the corpus's pieces alone.

        `options` are the constructor's policies; with whitespace='strip' the corpus is stripped too.
        Unmatched characters in the corpus are errors, as when encoding.
        """
        _check_training(min_frequency, base_vocabulary)
        counts = cls(**options).count_pieces(smiles)
        kept = sorted((p for p, c in counts.items() if c >= min_frequency), key=lambda p: (-counts[p], p))
        return cls(vocab=[*(base_tokens() if base_vocabulary else ()), *kept], **options)

    def count_pieces(self, smiles: Iterable[str]) -> Counter[str]:
        """How often each piece occurs in `smiles` (after the whitespace policy), in or out of the vocabulary."""
        counts: Counter[str] = Counter()
        batch: list[str] = []
        for text in smiles:
            batch.append(text)
            if len(batch) == 65536:
                counts.update(self._count_pieces(batch))
                batch = []
        counts.update(self._count_pieces(batch))
        return counts

    @classmethod
    def config_options(cls) -> list[str]:
        return [*super().config_options(), "min_frequency", "base_vocabulary"]

    @classmethod
    def build(cls, options: dict[str, Any], texts: Iterable[str] | None = None,
              files: Sequence[str] | None = None) -> "SmilesTokenizer":
        """From config: `vocab` when given; else trained on `texts` (`min_frequency`, `base_vocabulary`); else the
        base vocabulary."""
        check_options(cls, options)
        options = dict(options)
        training = {key: options.pop(key) for key in ("min_frequency", "base_vocabulary") if key in options}
        _check_training(**training)
        if options.get("vocab") is None and texts is not None:
            options.pop("vocab", None)
            return cls.train(texts, **training, **options)
        return cls(**options)

    # --- splitting ---------------------------------------------------------------------------
    def _strip(self, texts: Sequence[str], stats: PolicyStats | None) -> Sequence[str]:
        if self.whitespace != "strip":
            return texts
        stripped = [t.strip() for t in texts]
        if stats is not None and (removed := sum(map(len, texts)) - sum(map(len, stripped))):
            stats["whitespace_stripped"] += removed
        return stripped

    def _split(self, texts: Sequence[str], records: Sequence[str] | None):
        """The joined batch cut into regex pieces, vectorised.

        Returns (joined text, its codes, text starts, piece starts as a bool mask, id per position) where
        the id is valid at piece starts and may be `_UNSEEN` for pieces missing from the vocabulary.
        """
        joined = "".join(texts)
        codes, starts = codes_of(joined), text_starts(texts)
        n = len(codes)
        ids = self._single[codes]
        piece_start = np.ones(n, dtype=bool)
        same_text_next = np.ones(max(n - 1, 0), dtype=bool)
        boundaries = starts[1:-1]
        same_text_next[boundaries[(boundaries > 0) & (boundaries < n)] - 1] = False
        inside = np.zeros(n, dtype=bool)

        opens = np.flatnonzero(codes == ord("["))
        closes = np.flatnonzero(codes == ord("]"))
        if len(opens) or len(closes):
            inside = self._brackets(texts, joined, records, codes, starts, opens, closes, ids, piece_start)
        outside = ~inside

        def pairs(first: str, second: str) -> np.ndarray:
            found = _pair_starts((codes == ord(first)) & outside, codes == ord(second), same_text_next)
            return np.flatnonzero(found)

        for first, second, value in (("B", "r", self._bromine), ("C", "l", self._chlorine)):
            where = pairs(first, second)
            ids[where] = value
            piece_start[where + 1] = False
        if (codes == ord(">")).any():
            self._arrows(codes, outside, same_text_next, ids, piece_start)
        percent = np.flatnonzero((codes == ord("%")) & outside)
        if len(percent):
            digits = (codes >= ord("0")) & (codes <= ord("9"))
            ok = np.zeros(len(percent), dtype=bool)
            room = percent + 2 < n
            ok[room] = digits[percent[room] + 1] & digits[percent[room] + 2]
            ok &= np.searchsorted(starts, percent, side="right") == np.searchsorted(starts, percent + 2, side="right")
            if not ok.all():
                raise refuse(texts, records, starts, int(percent[~ok][0]),
                             "'%' must be followed by two digits (ring closure %NN)")
            number = (codes[percent + 1].astype(np.int32) - ord("0")) * 10 + codes[percent + 2] - ord("0")
            ids[percent] = self._ring[number]
            piece_start[percent + 1] = piece_start[percent + 2] = False

        unmatched = piece_start & (ids == _UNMATCHED)
        if unmatched.any():
            flat = int(np.argmax(unmatched))
            char = chr(codes[flat]) if codes[flat] < 128 else ""
            if char.isspace():
                detail = ("whitespace is not part of SMILES; refused by whitespace='error' (or set 'strip' for "
                          "leading/trailing whitespace)" if self.whitespace == "error" else
                          "whitespace inside a SMILES is never valid")
            else:
                detail = "matches no SMILES token (the reference regex would drop it silently)"
            raise refuse(texts, records, starts, flat, detail)
        return joined, codes, starts, piece_start, ids

    def _brackets(self, texts, joined, records, codes, starts, opens, closes, ids, piece_start) -> np.ndarray:
        """Bracket atoms: each `]` closes the first `[` after the previous `]` of its text (what the
        regex `\\[[^\\]]+]` does scanning left to right). Sets their ids and piece starts; returns
        the 'inside a bracket atom' mask."""
        n = len(codes)
        text_of_close = np.searchsorted(starts, closes, side="right") - 1
        previous_close = np.concatenate(([-1], closes[:-1]))
        lower = np.maximum(previous_close + 1, starts[text_of_close])
        opening = np.append(opens, n)[np.searchsorted(opens, lower)]
        stray = opening > closes
        if stray.any():
            raise refuse(texts, records, starts, int(closes[np.argmax(stray)]), "']' closes no bracket atom")
        empty = opening + 1 == closes
        if empty.any():
            raise refuse(texts, records, starts, int(opening[np.argmax(empty)]), "empty bracket atom '[]'")
        inside = np.zeros(n, dtype=bool)  # opening..close of every atom
        inside[span_positions(opening, closes + 1 - opening)] = True
        unclosed = opens[~inside[opens]]
        if len(unclosed):
            raise refuse(texts, records, starts, int(unclosed[0]), "'[' is never closed by ']' in this SMILES")
        piece_start[inside] = False
        piece_start[opening] = True
        vocab, unseen = self._vocab, self._unseen_id
        ids[opening] = [vocab.get(joined[a:b], unseen) for a, b in zip(opening.tolist(), (closes + 1).tolist())]
        return inside

    def _arrows(self, codes, outside, same_text_next, ids, piece_start) -> None:
        """`>>?`: in a run of '>', pieces pair up from the run's start ('>>>' is '>>' then '>')."""
        is_gt = (codes == ord(">")) & outside
        previous_gt = np.concatenate(([False], is_gt[:-1] & same_text_next))
        index = np.arange(len(codes))
        run_start = np.maximum.accumulate(np.where(is_gt & ~previous_gt, index, 0))
        arrow = is_gt & ((index - run_start) % 2 == 0) & np.concatenate((is_gt[1:] & same_text_next, [False]))
        where = np.flatnonzero(arrow)
        ids[where] = self._arrow
        piece_start[where + 1] = False

    def _piece_bounds(self, texts: Sequence[str], records: Sequence[str] | None):
        """(joined text, codes, piece start positions + the end, pieces per text)."""
        joined, codes, starts, piece_start, _ = self._split(texts, records)
        bounds = np.append(np.flatnonzero(piece_start), len(codes))
        return joined, codes, bounds, pieces_per_text(piece_start, starts)

    def _pieces(self, texts: Sequence[str], records: Sequence[str] | None,
                stats: PolicyStats | None) -> list[list[str]]:
        """The regex pieces of each text."""
        texts = self._strip(texts, stats)
        joined, _, bounds, per_text = self._piece_bounds(texts, records)
        pieces = [joined[a:b] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]
        cuts = np.concatenate(([0], np.cumsum(per_text))).tolist()
        return [pieces[a:b] for a, b in zip(cuts[:-1], cuts[1:])]

    def _count_pieces(self, texts: Sequence[str]) -> Counter[str]:
        """How often each piece occurs in `texts`: one-character pieces counted with numpy, the rest as strings."""
        texts = self._strip(texts, None)
        joined, codes, bounds, _ = self._piece_bounds(texts, None)
        lengths = np.diff(bounds)
        single = np.bincount(codes[bounds[:-1][lengths == 1]], minlength=TABLE_SIZE)
        counts = Counter({chr(code): int(n) for code, n in enumerate(single) if n})
        longer = np.flatnonzero(lengths > 1)
        counts.update(joined[a:b] for a, b in zip(bounds[longer].tolist(), bounds[longer + 1].tolist()))
        return counts

    # --- encoding ---------------------------------------------------------------------------
    def _content(self, texts, records, stats) -> tuple[np.ndarray, np.ndarray]:
        texts = self._strip(texts, stats)
        joined, codes, starts, piece_start, ids = self._split(texts, records)
        ids = ids[piece_start]
        unseen = ids == _UNSEEN
        if unseen.any():
            piece_starts = np.append(np.flatnonzero(piece_start), len(codes))
            at = int(np.argmax(unseen))
            piece = joined[piece_starts[at]:piece_starts[at + 1]]
            raise refuse(texts, records, starts, int(piece_starts[at]),
                         f"SMILES token {piece!r} is not in the vocabulary, refused by unknown='error' "
                         "(or set 'to_unk', or train on data that has it)")
        if stats is not None and self.unknown == "to_unk":
            if replaced := int((ids == self.unk_id).sum()):
                stats["unknown_to_unk"] += replaced
        return ids, pieces_per_text(piece_start, starts)

    def tokenize(self, text: str, record: str | None = None) -> list[str]:
        """The regex pieces of `text` (after the whitespace policy), whether or not they are in the vocabulary."""
        return self._pieces([text], None if record is None else [record], None)[0]

    def to_config(self) -> dict[str, Any]:
        return {"vocab": self._tokens[len(SPECIAL_TOKENS):], "unknown": self.unknown, "whitespace": self.whitespace}

    def to_hf(self):
        """`PreTrainedTokenizerFast` with the same ids: `Split` on the same regex + `WordLevel`
        (`Strip` normalizer for whitespace='strip'). HF cannot refuse, so refused input becomes `<unk>`."""
        from biotf.tokenizers.hf import wordlevel_hf_tokenizer

        return wordlevel_hf_tokenizer(self._vocab, piece_pattern=SMILES_PATTERN, strip=self.whitespace == "strip",
                                      unk="<unk>", cls="<cls>", eos="<eos>", pad="<pad>", mask="<mask>",
                                      special_tokens=SPECIAL_TOKENS)
