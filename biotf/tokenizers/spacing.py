"""How a plain sequence is typed for a checkpoint whose vocabulary reads words separated by spaces.

ProtBert, ProtT5, AntiBERTy and many antibody models read one residue per word: their authors feed
`" ".join(sequence)` ("M K T A Y"), and a plain "MKTAY" is one word the vocabulary cannot cut, a single unknown
token. DNABERT reads overlapping k-mers typed with spaces ("ATGCGA TGCGAT ...").

`spacing` says which convention turns a sequence into the text the checkpoint's pipeline reads:
- "none": the text as given;
- "residues": every residue its own word (whitespace in the input dropped first, so a sequence typed with spaces
  reads the same), counted as `spaced_residues` (records);
- "overlapping-kmers": every k-mer at stride 1 as a word (DNABERT's `seq2kmer`; k is the vocabulary's k-mer
  length), counted as `spaced_kmers` (records);
- "auto" (the default): "residues" where the vocabulary is one letter per word and reads a sequence only when
  spaced (plain, the letters are an unknown token; spaced, one known token each), else "none". A vocabulary of
  k-mers typed with spaces stays "none", since the same vocabulary serves overlapping and non-overlapping k-mers:
  a plain sequence longer than one k-mer is then refused, naming the option that says how to cut it.

`rare_residues` ("keep", "to_x", "error"): U, Z, O and B (ProtBert's and ProtT5's model cards map them to X before
the model sees them: `re.sub(r"[UZOB]", "X", sequence)`), as the protein tokenizer's policy of the same name;
mapped ones are counted as `rare_to_X`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from biotf.errors import ConfigError, InputError, TokenizationError, check_choice
from biotf.tokenizers.base import PolicyStats
from biotf.naming import parameter

SPACINGS = ("auto", "none", "residues", "overlapping-kmers")
RARE_POLICIES = ("keep", "to_x", "error")
RARE_RESIDUES = re.compile("[UZOB]")
# Marks a tokenizer puts on a word's first or following pieces (SentencePiece, byte-level BPE, WordPiece).
WORD_MARKS = ("▁", "Ġ", "##")
NUCLEOTIDES = frozenset("ACGTN")
SPACING_OPTION = "spacing"


@dataclass(frozen=True)
class Spacing:
    """The resolved convention: `mode` ("none", "residues", "overlapping-kmers"), what the user asked for
    (`requested`), the vocabulary's k-mer length (`k`, where its words are k-mers) and the rare-residue policy."""

    mode: str
    requested: str = "auto"
    k: int | None = None
    rare_residues: str = "keep"

    @classmethod
    def of(cls, backend, vocab: Mapping[str, int], unk_id: int | None, special_tokens: Sequence[str],
           requested: str = "auto", rare_residues: str = "keep") -> "Spacing":
        """The convention of the `tokenizers` pipeline `backend` (its `vocab` and `special_tokens`), `requested` or
        detected. A pipeline without unknown input (byte-level BPE: GPT-2, Qwen) reads every text as given, so its
        vocabulary is not scanned."""
        check_choice(f"tokenizer.{SPACING_OPTION}", requested, SPACINGS)
        check_choice("tokenizer.rare_residues", rare_residues, RARE_POLICIES)
        if unk_id is None and requested != "overlapping-kmers":
            return cls("none" if requested == "auto" else requested, requested, None, rare_residues)
        excluded = set(special_tokens) | {token.content for token in backend.get_added_tokens_decoder().values()}
        k = kmer_length(backend, vocab, excluded)
        if requested == "overlapping-kmers" and k is None:
            raise ConfigError(f"tokenizer.{SPACING_OPTION}", requested, allowed="none, residues",
                              reason="the vocabulary's words are not k-mers of one length")
        mode = requested
        if requested == "auto":
            mode = "residues" if reads_spaced_residues(backend, vocab, unk_id, excluded) else "none"
        return cls(mode, requested, k, rare_residues)

    @property
    def changes_text(self) -> bool:
        """Whether any text is typed otherwise than given (what fingerprints and saved files must record)."""
        return self.mode != "none" or self.rare_residues != "keep"

    def describe(self) -> dict[str, str]:
        """For an output's info: the convention and whether it was detected; {} where text is read as given."""
        if not self.changes_text:
            return {}
        how = "detected from the vocabulary" if self.requested == "auto" and self.mode != "none" else "as set"
        return {SPACING_OPTION: f"{self.mode} ({how})", "rare_residues": self.rare_residues}

    def type_texts(self, texts: Sequence[str], records: Sequence[str] | None,
                   stats: PolicyStats | None) -> list[str]:
        """`texts` as the checkpoint's authors typed them; what changed counted in `stats`."""
        if not self.changes_text and self.k is None:
            return list(texts)
        typed = []
        for item, text in enumerate(texts):
            record = None if records is None else str(records[item])
            text = self._rare(text, record, stats)
            if self.mode == "residues":
                text = " ".join("".join(text.split()))
            elif self.mode == "overlapping-kmers":
                text = self._kmers("".join(text.split()), record)
            elif self.k is not None and len(text) > self.k and not any(c.isspace() for c in text):
                raise InputError(f"{'record ' + repr(record) if record is not None else 'a text'} is a plain "
                                 f"sequence, but the vocabulary reads {self.k}-mers typed with spaces and cannot tell "
                                 f"how to cut it: set the tokenizer option {SPACING_OPTION}=overlapping-kmers "
                                 f"(`{parameter('tokenizer_options')} {SPACING_OPTION}=overlapping-kmers`: DNABERT's every k-mer "
                                 "at stride 1), "
                                 "or type the k-mers with spaces")
            typed.append(text)
        if stats is not None and self.mode in ("residues", "overlapping-kmers") and typed:
            stats[f"spaced_{'residues' if self.mode == 'residues' else 'kmers'}"] += len(typed)
        return typed

    def count_residues(self, text: str) -> int:
        """The residues of `text`: its characters, the spaces of a spaced convention left out."""
        return len(text) if self.mode == "none" else sum(1 for c in text if not c.isspace())

    def _rare(self, text: str, record: str | None, stats: PolicyStats | None) -> str:
        if self.rare_residues == "keep":
            return text
        found = RARE_RESIDUES.search(text)
        if found is None:
            return text
        if self.rare_residues == "error":
            raise TokenizationError(found.group(), found.start(), record=record,
                                    detail="rare residue refused by rare_residues='error' (or set 'keep' / 'to_x')")
        text, mapped = RARE_RESIDUES.subn("X", text)
        if stats is not None:
            stats["rare_to_X"] += mapped
        return text

    def _kmers(self, sequence: str, record: str | None) -> str:
        if len(sequence) < self.k:
            raise InputError(f"{'record ' + repr(record) if record is not None else 'a text'} has "
                             f"{len(sequence)} residues, fewer than one {self.k}-mer ({SPACING_OPTION}="
                             "overlapping-kmers)")
        return " ".join(sequence[i:i + self.k] for i in range(len(sequence) - self.k + 1))


def _word(token: str) -> str:
    for mark in WORD_MARKS:
        token = token.removeprefix(mark)
    return token


def vocabulary_words(vocab: Mapping[str, int], excluded: set[str]) -> Iterator[str]:
    """The words of the vocabulary without their pieces' marks, the `excluded` (special, added) tokens left out."""
    for token in vocab:
        if token not in excluded and (word := _word(token)):
            yield word


def reads_spaced_residues(backend, vocab: Mapping[str, int], unk_id: int, excluded: set[str]) -> bool:
    """Whether the vocabulary is one letter per word (at least four capitals among them) and reads a sequence only
    when typed with spaces: the letters together are an unknown token, the letters spaced one known token each
    (ProtBert's WordPiece, ProtT5's SentencePiece `▁M`). A vocabulary with longer words (English) or a pipeline
    that cuts plain letters (ESM's) reads plain."""
    words = set()
    for word in vocabulary_words(vocab, excluded):
        if len(word) != 1:
            return False
        words.add(word)
    letters = sorted(word for word in words if "A" <= word <= "Z")
    if len(letters) < 4:
        return False
    probe = "".join(letters)
    if unk_id not in backend.encode(probe, add_special_tokens=False).ids:
        return False
    spaced = backend.encode(" ".join(probe), add_special_tokens=False).ids
    return len(spaced) == len(letters) and unk_id not in spaced


def kmer_length(backend, vocab: Mapping[str, int], excluded: set[str]) -> int | None:
    """k, where every word of the vocabulary but the `excluded` tokens is a k-mer of nucleotides (k >= 2) and the
    pipeline splits words on whitespace (DNABERT); else None."""
    k = None
    for word in vocabulary_words(vocab, excluded):
        k = len(word) if k is None else k
        if len(word) != k or not NUCLEOTIDES.issuperset(word):
            return None
    if k is None:
        return None
    probe = "ACGT" * k
    if k < 2 or len(backend.encode(f"{probe[:k]} {probe[1:k + 1]}", add_special_tokens=False).ids) != 2:
        return None
    return k
