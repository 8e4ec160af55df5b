"""Amino-acid tokenizer: one token per residue, ESM-2's vocabulary exactly.

Layout (ESM-2, `esm.pretrained.esm2_*` alphabet and HF `facebook/esm2_*` vocab.txt, 33 tokens):
0 `<cls>`, 1 `<pad>`, 2 `<eos>`, 3 `<unk>`, 4-28 `L A G V S E R T I D P K Q N F Y M H W C X B U Z O`,
29 `.`, 30 `-`, 31 `<null_1>`, 32 `<mask>`. `encode` adds `<cls>` ... `<eos>` as ESM does.

Character policies (explicit options; the defaults keep ESM's behaviour and refuse what it would
silently turn into `<unk>`):
- `lowercase`: "fold" (default: `a` -> `A`) or "error".
- `rare_residues` U (selenocysteine), O (pyrrolysine), B (D/N), Z (E/Q): "keep" (default, ESM has
  them in its vocabulary), "to_x" (map each to X, as ProtTrans does) or "error".
- `unknown` (anything else: `J`, `*`, digits, whitespace, non-ASCII): "error" (default) or "to_unk"
  (one `<unk>` per character).
- `stop`, the stop codon `*` of translated genes: "error" (default: `*` is an unknown character as
  before, refused, or `<unk>` under unknown="to_unk"), "strip_terminal" (one `*` at the end of a
  sequence is dropped, counted as `stop_stripped`; any other `*` as with "error") or "to_unk" (every
  `*` becomes `<unk>`, counted as `stop_to_unk`). The fingerprint includes `stop` only when it changes
  ids ("strip_terminal", or "to_unk" with unknown="error"), so tokenizers saved before it existed load
  with the same fingerprint.

Special-token strings written in the text (`<mask>`, `<cls>`, ...) are read as those tokens, as
ESM's and HF's tokenizers do; a `<` that starts no special token follows the unknown policy.

Fast path: `encode_batch` joins the batch, maps every character through a 129-entry table whose
entries already carry the policies, and cuts the result per text (numpy only).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np

from biotf.errors import CheckpointError, check_choice
from biotf.tokenizers._arrays import NON_ASCII, CharTable, refuse
from biotf.tokenizers.base import PolicyStats, register_tokenizer
from biotf.tokenizers.vocabulary import VocabularyTokenizer

ESM2_TOKENS = ("<cls>", "<pad>", "<eos>", "<unk>", *"LAGVSERTIDPKQNFYMHWCXBUZO", ".", "-", "<null_1>", "<mask>")
RARE_RESIDUES = "UOBZ"
SPECIAL_TOKENS = tuple(t for t in ESM2_TOKENS if t.startswith("<"))
_SPECIAL_PATTERN = re.compile("|".join(re.escape(t) for t in SPECIAL_TOKENS))

LOWERCASE_POLICIES = ("fold", "error")
RARE_POLICIES = ("keep", "to_x", "error")
UNKNOWN_POLICIES = ("error", "to_unk")
STOP_POLICIES = ("error", "strip_terminal", "to_unk")
STOP = "*"


@register_tokenizer("protein")
class AminoAcidTokenizer(VocabularyTokenizer):
    """One token per residue in ESM-2's 33-token vocabulary, with explicit character policies."""

    policy_options = ("lowercase", "rare_residues", "unknown", "stop")

    def __init__(self, lowercase: str = "fold", rare_residues: str = "keep", unknown: str = "error",
                 stop: str = "error"):
        check_choice("tokenizer.lowercase", lowercase, LOWERCASE_POLICIES)
        check_choice("tokenizer.rare_residues", rare_residues, RARE_POLICIES)
        check_choice("tokenizer.unknown", unknown, UNKNOWN_POLICIES)
        check_choice("tokenizer.stop", stop, STOP_POLICIES)
        self.lowercase, self.rare_residues, self.unknown, self.stop = lowercase, rare_residues, unknown, stop
        self._set_vocabulary(ESM2_TOKENS)
        self.cls_id, self.pad_id, self.eos_id = self._vocab["<cls>"], self._vocab["<pad>"], self._vocab["<eos>"]
        self.unk_id, self.mask_id = self._vocab["<unk>"], self._vocab["<mask>"]
        self._skip_ids = frozenset(self._vocab[t] for t in SPECIAL_TOKENS) - {self.unk_id}
        self._table = self._build_table()

    @staticmethod
    def is_esm_vocab(path: str | PathLike) -> bool:
        """Whether the file `path` is ESM-2's vocab.txt, token for token (what `from_esm_vocab` reads)."""
        path = Path(path)
        return path.is_file() and tuple(line.strip() for line in
                                        path.read_text(encoding="utf-8").splitlines()) == ESM2_TOKENS

    @classmethod
    def from_esm_vocab(cls, path: str | PathLike) -> AminoAcidTokenizer:
        """The tokenizer of a Hugging Face ESM checkpoint, from its vocab.txt (token of id i on line i + 1, read as
        HF `EsmTokenizer` reads it). Refused unless the ids are ESM-2's layout, the one this class encodes: any
        other layout would give the model's embedding rows other tokens' meaning."""
        path = Path(path)
        if not path.is_file():
            raise CheckpointError(f"{path} does not exist: an ESM checkpoint directory needs its vocab.txt")
        tokens = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
        for token_id, (theirs, ours) in enumerate(zip(tokens, ESM2_TOKENS)):
            if theirs != ours:
                raise CheckpointError(f"{path}: id {token_id} is {theirs!r}, biotf's protein tokenizer (ESM-2's "
                                      f"layout) has {ours!r} there; this vocabulary cannot be mapped onto it")
        if len(tokens) != len(ESM2_TOKENS):
            raise CheckpointError(f"{path} has {len(tokens)} tokens, ESM-2's layout (biotf's protein tokenizer) "
                                  f"has {len(ESM2_TOKENS)}; this vocabulary cannot be mapped onto it")
        return cls()

    def _build_table(self) -> CharTable:
        """Per character code: its id, or why it is refused, and which stats it counts in."""
        table = CharTable()
        for token in ESM2_TOKENS:
            if not token.startswith("<"):
                table.set(token, self._vocab[token])
        if self.rare_residues == "to_x":
            table.set(RARE_RESIDUES, self._vocab["X"], "rare_to_X")
        elif self.rare_residues == "error":
            table.refuse(RARE_RESIDUES, "rare residue refused by rare_residues='error' (or set 'keep' / 'to_x')")
        # the residue letters fold; other lowercase letters follow the unknown policy
        table.fold_lowercase("".join(ESM2_TOKENS[4:29]), self.lowercase == "fold",
                             "lowercase residue refused by lowercase='error' (or set 'fold')")
        if self.stop == "to_unk":
            table.set(STOP, self.unk_id, "stop_to_unk")
        elif self.unknown == "error":
            where = "inside the sequence" if self.stop == "strip_terminal" else "refused by stop='error'"
            table.refuse(STOP, f"stop codon {where} and unknown='error' (set stop='strip_terminal' to drop one "
                               "at the end, or stop='to_unk')")
        table.fill_unknown(self.unk_id if self.unknown == "to_unk" else None,
                           "not an amino-acid code, refused by unknown='error' (or set 'to_unk')")
        return table

    # --- encoding ---------------------------------------------------------------------------
    def _content(self, texts: Sequence[str], records: Sequence[str] | None,
                 stats: PolicyStats | None) -> tuple[np.ndarray, np.ndarray]:
        """Flat content ids of the batch (no cls/eos) and the number of ids per text."""
        if self.stop == "strip_terminal":
            texts = self._strip_terminal_stops(texts, stats)
        ids, codes, starts, any_refused, joined = self._table.lookup(texts)
        keep = counted = None
        if "<" in joined and _SPECIAL_PATTERN.search(joined):
            ids = ids.copy()  # lookup may return a read-only view
            keep, counted = self._read_special_tokens(texts, codes, starts, ids)
        if any_refused:
            refused = ids == self._table.refused_value
            if keep is not None:
                refused &= keep
            if refused.any():
                flat = int(np.argmax(refused))
                raise refuse(texts, records, starts, flat, self._table.reason(codes[flat]))
        if keep is None:
            counts = np.diff(starts)
        else:
            kept_before = np.zeros(len(keep) + 1, dtype=np.int64)
            np.cumsum(keep, out=kept_before[1:])
            counts = np.diff(kept_before[starts])
            ids = ids[keep]
        self._table.add_stats(codes if counted is None else codes[counted], stats)
        return ids, counts

    @staticmethod
    def _strip_terminal_stops(texts: Sequence[str], stats: PolicyStats | None) -> Sequence[str]:
        """The texts without one trailing `*` each (positions of the rest are unchanged), counted."""
        stripped = [text[:-1] if text.endswith(STOP) else text for text in texts]
        if stats is not None and (count := sum(len(a) != len(b) for a, b in zip(texts, stripped))):
            stats["stop_stripped"] += count
        return stripped

    def _read_special_tokens(self, texts: Sequence[str], codes: np.ndarray, starts: np.ndarray,
                             ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Give each special-token string in the texts its id (in place, at its first character);
        returns the positions to keep and the positions whose characters count in policy stats."""
        first = np.zeros(len(ids), dtype=bool)
        interior = np.zeros(len(ids), dtype=bool)
        items = np.unique(np.searchsorted(starts, np.flatnonzero(codes == ord("<")), side="right") - 1)
        for item in items:
            base = int(starts[item])
            for match in _SPECIAL_PATTERN.finditer(texts[item]):
                ids[base + match.start()] = self._vocab[match.group()]
                first[base + match.start()] = True
                interior[base + match.start() + 1:base + match.end()] = True
        keep = ~interior
        return keep, keep & ~first

    # --- vocabulary and persistence --------------------------------------------------------
    @property
    def special_ids(self) -> frozenset[int]:
        return self._skip_ids

    def to_config(self) -> dict[str, Any]:
        return {"lowercase": self.lowercase, "rare_residues": self.rare_residues, "unknown": self.unknown,
                "stop": self.stop}

    def identity_config(self) -> dict[str, Any]:
        """`stop` only where it changes ids: "error" (and "to_unk" under unknown="to_unk") give the ids that
        tokenizers saved before the option existed gave, so their fingerprints stay."""
        config = self.to_config()
        if self.stop == "error" or (self.stop == "to_unk" and self.unknown == "to_unk"):
            del config["stop"]
        return config

    def to_hf(self):
        """`PreTrainedTokenizerFast` with the same ids: WordLevel over single characters, the policies
        as `Replace` normalizers. HF cannot refuse a character, so inputs that biotf refuses become
        `<unk>` there; on every input biotf accepts the ids are identical."""
        from biotf.tokenizers.hf import wordlevel_hf_tokenizer

        replacements = {}
        for code in range(NON_ASCII):
            target = int(self._table.values[code])
            if target not in (CharTable.REFUSED, self.unk_id) and self._tokens[target] != chr(code):
                replacements[chr(code)] = self._tokens[target]
        return wordlevel_hf_tokenizer(self._vocab, piece_pattern=".", replacements=replacements, unk="<unk>",
                                      remove_pattern=r"\*$" if self.stop == "strip_terminal" else None,
                                      cls="<cls>", eos="<eos>", pad="<pad>", mask="<mask>",
                                      special_tokens=SPECIAL_TOKENS, split_special_tokens=False)
