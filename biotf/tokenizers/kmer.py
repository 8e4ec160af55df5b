"""DNA k-mer tokenizer: Nucleotide-Transformer-style non-overlapping, DNABERT-style overlapping, or characters.

`KmerTokenizer(k, stride)` cuts every run of A/C/G/T into windows of k bases starting every
`stride` bases; the bases after the last full window are single-nucleotide tokens, and every `N`
(or `<unk>`) is its own token and ends the run. So:
- `stride == k` (default, Nucleotide Transformer): `ATCGAATNGGCGATGCAC`, k=6 ->
  `ATCGAA T N GGCGAT G C A C`;
- `stride == 1` (DNABERT): every window of k bases of each run (a run shorter than k is single bases);
- `k == 1`: a character tokenizer.
Any `1 <= stride <= k` works the same way; `stride < k` is "overlapping" and has no HF equivalent.

Vocabulary (fixed, documented order; ids never depend on data):
0 `<pad>`, 1 `<unk>`, 2 `<cls>`, 3 `<eos>`, 4 `<mask>`, then all 4^k k-mers in lexicographic order
over A < C < G < T (`itertools.product("ACGT", repeat=k)`: id = 5 + the k-mer read as a base-4
number), then the single nucleotides A C G T N (those not already k-mers). `encode` adds
`<cls>` ... `<eos>`.

Character policies (explicit options):
- `lowercase` (soft-masked repeats): "fold" (default) or "error". The soft-mask itself is kept
  on request: `encode_batch_with_soft_mask` returns, per token, whether any of its bases was lowercase.
- `uracil` (RNA `U`): "error" (default) or "to_t".
- `iupac` ambiguity codes R Y S W K M B D H V: "to_n" (default) or "error".
- `unknown` (anything else: digits, `-`, `*`, whitespace, non-ASCII): "error" (default) or "to_unk"
  (one `<unk>` per character).

The fast path is numpy over the whole batch: a character table, run boundaries by cumulative
max/min, window values as base-4 numbers, and one boolean "token starts here" mask.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import product
from typing import Any

import numpy as np

from biotf.errors import BiotfError, ConfigError, TokenizationError, check_choice
from biotf.tokenizers._arrays import CharTable, assemble, refuse, span_positions
from biotf.tokenizers.base import PolicyStats, register_tokenizer
from biotf.tokenizers.vocabulary import VocabularyTokenizer

SPECIAL_TOKENS = ("<pad>", "<unk>", "<cls>", "<eos>", "<mask>")
BASES = "ACGT"
IUPAC_AMBIGUITY = "RYSWKMBDHV"
# Watson-Crick pairs plus IUPAC ambiguity codes: R(A/G)<->Y(C/T), K(G/T)<->M(A/C), B(not A)<->V(not T),
# D(not C)<->H(not G); S(C/G), W(A/T) and N pair with themselves. U (RNA) pairs with A.
_COMPLEMENT = dict(zip("ACGTURYKMBVDHSWN", "TGCAAYRMKVBHDSWN"))
_COMPLEMENT.update({a.lower(): b.lower() for a, b in _COMPLEMENT.items()})
_COMPLEMENT_TABLE = str.maketrans(_COMPLEMENT)

LOWERCASE_POLICIES = ("fold", "error")
URACIL_POLICIES = ("error", "to_t")
IUPAC_POLICIES = ("to_n", "error")
UNKNOWN_POLICIES = ("error", "to_unk")

# Values of the character table: 0-3 a base, then these.
_N, _UNK = 4, 5


def reverse_complement(sequence: str, record: str | None = None) -> str:
    """Reverse complement of a DNA (or RNA) sequence, IUPAC codes included; case is kept.

    R<->Y, K<->M, B<->V, D<->H; S, W and N map to themselves; U maps to A. Any other character is
    an error naming its position in `sequence`.
    """
    complement = sequence.translate(_COMPLEMENT_TABLE)
    for position, char in enumerate(sequence):
        if char not in _COMPLEMENT:
            raise TokenizationError(char, position, record=record, detail="not a nucleotide or IUPAC code")
    return complement[::-1]


def _any_in_window(flags: np.ndarray, window_at: np.ndarray, k: int) -> np.ndarray:
    """Whether any of flags[p:p + k] is set, for each window start p (windows lie inside `flags`)."""
    before = np.zeros(len(flags) + 1, dtype=np.int32)
    np.cumsum(flags, out=before[1:])
    return before[window_at + k] - before[window_at] > 0


@register_tokenizer("dna")
class KmerTokenizer(VocabularyTokenizer):
    """k-mers of DNA with a stride: non-overlapping (stride == k), overlapping (stride < k), characters (k == 1)."""

    policy_options = ("lowercase", "uracil", "iupac", "unknown")

    def __init__(self, k: int = 6, stride: int | None = None, lowercase: str = "fold", uracil: str = "error",
                 iupac: str = "to_n", unknown: str = "error"):
        stride = k if stride is None else stride
        self._check(k, stride, lowercase, uracil, iupac, unknown)
        self.k, self.stride = k, stride
        self.lowercase, self.uracil, self.iupac, self.unknown = lowercase, uracil, iupac, unknown

        kmers = ["".join(p) for p in product(BASES, repeat=k)]
        self._set_vocabulary([*SPECIAL_TOKENS, *kmers, *(b for b in BASES + "N" if k > 1 or b == "N")])
        self.pad_id, self.unk_id, self.cls_id, self.eos_id, self.mask_id = (self._vocab[t] for t in SPECIAL_TOKENS)
        self._kmer_offset = len(SPECIAL_TOKENS)
        # id of the single-character token for each table value (A C G T N <unk>)
        self._single_ids = np.array([self._vocab[b] for b in BASES + "N"] + [self.unk_id], dtype=np.int32)
        self._table = self._build_table()
        self._is_lower = np.zeros(len(self._table.values), dtype=bool)
        self._is_lower[ord("a"):ord("z") + 1] = True

    @staticmethod
    def _check(k: int = 6, stride: int | None = None, lowercase: str = "fold", uracil: str = "error",
               iupac: str = "to_n", unknown: str = "error") -> None:
        if not isinstance(k, int) or not 1 <= k <= 12:
            raise ConfigError("tokenizer.k", k, allowed="an integer from 1 to 12")
        stride = k if stride is None else stride
        if not isinstance(stride, int) or not 1 <= stride <= k:
            raise ConfigError("tokenizer.stride", stride, allowed=f"an integer from 1 to k={k}")
        check_choice("tokenizer.lowercase", lowercase, LOWERCASE_POLICIES)
        check_choice("tokenizer.uracil", uracil, URACIL_POLICIES)
        check_choice("tokenizer.iupac", iupac, IUPAC_POLICIES)
        check_choice("tokenizer.unknown", unknown, UNKNOWN_POLICIES)

    @classmethod
    def check_config(cls, options: dict[str, Any]) -> None:
        """The checks alone: building would list all 4^k k-mers (16.8M at k=12) only to drop them."""
        cls._check(**options)

    def _build_table(self) -> CharTable:
        table = CharTable()
        for value, base in enumerate(BASES):
            table.set(base, value)
        table.set("N", _N)
        if self.uracil == "to_t":
            table.set("U", BASES.index("T"), "U_to_T")
        else:
            table.refuse("U", "RNA uracil refused by uracil='error' (or set 'to_t')")
        if self.iupac == "to_n":
            table.set(IUPAC_AMBIGUITY, _N, "iupac_to_N")
        else:
            table.refuse(IUPAC_AMBIGUITY, "IUPAC ambiguity code refused by iupac='error' (or set 'to_n')")
        table.fold_lowercase(BASES + "NU" + IUPAC_AMBIGUITY, self.lowercase == "fold",
                             "lowercase (soft-masked) base refused by lowercase='error' (or set 'fold')")
        table.fill_unknown(_UNK if self.unknown == "to_unk" else None,
                           "not a nucleotide code, refused by unknown='error' (or set 'to_unk')")
        return table

    # --- encoding ---------------------------------------------------------------------------
    def _content(self, texts: Sequence[str], records: Sequence[str] | None, stats: PolicyStats | None,
                 soft_mask: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Flat content ids of the batch, ids per text, and (on request) the per-token soft-mask."""
        values, codes, starts, any_refused, _ = self._table.lookup(texts)
        if any_refused:
            flat = int(np.argmax(values == self._table.refused_value))
            raise refuse(texts, records, starts, flat, self._table.reason(codes[flat]))
        self._table.add_stats(codes, stats)
        lower = self._is_lower[codes] if soft_mask else None
        if self.k == 1:
            return self._single_ids[values], np.diff(starts), lower
        return self._windows(values, starts, lower)

    def _windows(self, values: np.ndarray, starts: np.ndarray, lower: np.ndarray | None):
        """Vectorised k-mer cutting of the joined batch (the rule is in the module docstring).

        The batch is cut into segments: runs of bases (A/C/G/T) and single other characters (N,
        <unk>), at text starts and around every non-base. Each run of length L gives
        n = (L - k) // stride + 1 windows (0 if L < k) then L - ((n - 1) * stride + k) single bases.
        Per-token work is then a few `repeat`s and gathers: with stride == k about n/k tokens.
        """
        total, k, stride = len(values), self.k, self.stride
        nonbase = np.flatnonzero(values >= 4)
        cuts = np.union1d(np.concatenate((starts, nonbase, nonbase + 1)), [total])
        seg_start, seg_end = cuts[:-1], cuts[1:]
        seg_start, seg_end = seg_start[seg_start < total], seg_end[seg_start < total]
        length = seg_end - seg_start
        is_run = values[seg_start] < 4
        windows = np.where(is_run & (length >= k), (length - k) // stride + 1, 0)
        windows_end = np.where(windows > 0, (windows - 1) * stride + k, 0)
        per_segment = np.where(is_run, windows + length - windows_end, 1)

        text_of_segment = np.searchsorted(starts, seg_start, side="right") - 1
        counts = np.bincount(text_of_segment, weights=per_segment, minlength=len(starts) - 1).astype(np.int64)
        if stride == 1:
            ids, token_lower = self._overlapping(values, seg_start, seg_end, is_run & (windows > 0), lower)
            return ids, counts, token_lower

        # one row per token: its segment, its rank j within the segment, its first position
        segment = np.repeat(np.arange(len(seg_start)), per_segment)
        first_token = np.concatenate(([0], np.cumsum(per_segment)[:-1]))
        rank = np.arange(len(segment)) - first_token[segment]
        seg_windows = windows[segment]
        is_window = rank < seg_windows
        position = seg_start[segment] + np.where(is_window, rank * stride, windows_end[segment] + rank - seg_windows)

        ids = self._single_ids[values[position]]
        window_at = position[is_window]
        ids[is_window] = self._kmer_offset + self._kmer_values(values, window_at)
        token_lower = None
        if lower is not None:
            token_lower = lower[position]
            token_lower[is_window] = _any_in_window(lower, window_at, k)
        return ids, counts, token_lower

    def _overlapping(self, values: np.ndarray, seg_start: np.ndarray, seg_end: np.ndarray, windowed: np.ndarray,
                     lower: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        """stride == 1, where almost every position starts a token: full-length passes beat per-token
        bookkeeping. A run of length >= k has a window at each position but its last k - 1; every
        other position (short runs, N, <unk>) is a single-character token."""
        total, k = len(values), self.k
        # the last k - 1 positions of every windowed run start no token
        ends = seg_end[windowed]
        tail = (ends[:, None] - np.arange(1, k)[None, :]).ravel()
        emit = np.ones(total, dtype=bool)
        emit[tail] = False
        is_window = values < 4
        short_runs = (values[seg_start] < 4) & ~windowed  # runs shorter than k: single bases
        is_window[span_positions(seg_start[short_runs], seg_end[short_runs] - seg_start[short_runs])] = False
        is_window &= emit
        ids = self._single_ids[values]
        rolling = np.zeros(total, dtype=np.int32)
        self._rolling_kmers(values, rolling)
        np.add(rolling, self._kmer_offset, out=ids, where=is_window, casting="unsafe")
        token_lower = None
        if lower is not None:
            token_lower = lower.copy()
            token_lower[is_window] = _any_in_window(lower, np.flatnonzero(is_window), k)
            token_lower = token_lower[emit]
        return ids[emit], token_lower

    def _kmer_values(self, values: np.ndarray, window_at: np.ndarray) -> np.ndarray:
        """The k bases at each window start read as a base-4 number (A=0 C=1 G=2 T=3)."""
        if len(window_at) * 2 >= len(values):  # dense windows: one rolling pass, then one gather
            rolling = np.zeros(len(values), dtype=np.int32)
            self._rolling_kmers(values, rolling)
            return rolling[window_at]
        kmer = values[window_at].astype(np.int32)  # sparse windows: gather the k columns
        for j in range(1, self.k):
            kmer *= 4
            kmer += values[window_at + j]
        return kmer

    def _rolling_kmers(self, values: np.ndarray, out: np.ndarray) -> None:
        """out[p] = the k-mer value starting at p, for every p <= len(values) - k (in place, k passes)."""
        k, end = self.k, len(values) - self.k + 1
        if end <= 0:
            return
        rolling = out[:end]
        rolling[:] = values[:end]
        for j in range(1, k):
            rolling *= 4
            rolling += values[j:end + j]

    def encode_batch_with_soft_mask(self, texts: Sequence[str], add_special_tokens: bool = True,
                                    records: Sequence[str] | None = None, stats: PolicyStats | None = None
                                    ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """`encode_batch` plus, per token, True where any of its bases was lowercase (soft-masked)
        in the input; special tokens are False. Requires lowercase='fold'."""
        if self.lowercase != "fold":
            raise ConfigError("tokenizer.lowercase", self.lowercase, allowed="fold",
                              reason="a soft-mask needs lowercase bases to be folded, not refused")
        ids, counts, lower = self._content(texts, records, stats, soft_mask=True)
        specials = (self.cls_id, self.eos_id) if add_special_tokens else (None, None)
        masks = assemble(lower.astype(np.int32), counts, *(0 if s is not None else None for s in specials))
        return assemble(ids, counts, *specials), [m.astype(bool) for m in masks]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """Inverse of `encode` (after policies): overlapping windows contribute `stride` new bases each."""
        skip = self.special_ids if skip_special_tokens else frozenset()
        tokens = [self._tokens[i] for i in map(int, ids) if i not in skip]
        kmer_ids = range(self._kmer_offset, self._kmer_offset + 4 ** self.k)
        is_kmer = [self.k > 1 and self._vocab[t] in kmer_ids for t in tokens] + [False]
        return "".join(t[:self.stride] if is_kmer[i] and is_kmer[i + 1] else t for i, t in enumerate(tokens))

    # --- vocabulary and persistence --------------------------------------------------------
    @property
    def overlapping(self) -> bool:
        return self.stride < self.k

    def to_config(self) -> dict[str, Any]:
        return {"k": self.k, "stride": self.stride, "lowercase": self.lowercase, "uracil": self.uracil,
                "iupac": self.iupac, "unknown": self.unknown}

    def to_hf(self):
        """`PreTrainedTokenizerFast` with the same ids (non-overlapping k-mers and characters only)."""
        if self.overlapping:
            raise BiotfError(
                f"overlapping k-mers (k={self.k}, stride={self.stride}) have no Hugging Face tokenizers "
                "equivalent: a pre-tokenizer cannot emit overlapping pieces. Use biotf's KmerTokenizer, or "
                "stride == k for an exportable tokenizer")
        from biotf.tokenizers.hf import wordlevel_hf_tokenizer

        replacements = {}
        for code in range(128):
            value = int(self._table.values[code])
            if value in (CharTable.REFUSED, _UNK):
                continue
            token = (BASES + "N")[value]
            if token != chr(code):
                replacements[chr(code)] = token
        pattern = f"[ACGT]{{{self.k}}}|." if self.k > 1 else "."
        return wordlevel_hf_tokenizer(self._vocab, piece_pattern=pattern, replacements=replacements, unk="<unk>",
                                      cls="<cls>", eos="<eos>", pad="<pad>", mask="<mask>",
                                      special_tokens=SPECIAL_TOKENS)
