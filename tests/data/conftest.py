"""A tiny character tokenizer with the shared interface, so data tests do not depend on the real schemes."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from biotf.errors import TokenizationError
from biotf.tokenizers.base import PolicyStats, Tokenizer

SPECIALS = ("<cls>", "<pad>", "<eos>", "<unk>", "<mask>")


class CharTokenizer(Tokenizer):
    """One token per character of `alphabet`; lowercase folded (counted), anything else refused.

    `k`/`stride` mimic KmerTokenizer's attributes for the span-masking code (ids stay per character).
    """

    kind = "test-char"

    def __init__(self, alphabet: str = "ACDEFGHIKLMNPQRSTVWY", k: int = 1, stride: int = 1):
        self.alphabet, self.k, self.stride = alphabet, k, stride
        self.tokens = [*SPECIALS, *alphabet]
        self.vocab = {t: i for i, t in enumerate(self.tokens)}
        self.cls_id, self.pad_id, self.eos_id, self.unk_id, self.mask_id = range(5)

    def tokenize(self, text: str, record: str | None = None) -> list[str]:
        return [self.tokens[i] for i in self.encode(text, add_special_tokens=False, record=record)]

    def encode(self, text: str, add_special_tokens: bool = True, record: str | None = None,
               stats: PolicyStats | None = None) -> list[int]:
        ids = []
        for position, char in enumerate(text):
            if char.upper() != char and stats is not None:
                stats["lowercase_folded"] += 1
            if char.upper() not in self.vocab or char.upper() in SPECIALS:
                raise TokenizationError(char, position, record, detail="not in the test alphabet")
            ids.append(self.vocab[char.upper()])
        return [self.cls_id, *ids, self.eos_id] if add_special_tokens else ids

    def encode_batch(self, texts, add_special_tokens=True, records=None, stats=None):
        import numpy as np

        names = records if records is not None else [None] * len(texts)
        return [np.asarray(self.encode(t, add_special_tokens, r, stats), np.int32) for t, r in zip(texts, names)]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        return "".join(self.tokens[i] for i in ids if not (skip_special_tokens and i in self.special_ids))

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def get_vocab(self) -> dict[str, int]:
        return dict(self.vocab)

    def to_config(self) -> dict[str, Any]:
        return {"alphabet": self.alphabet, "k": self.k, "stride": self.stride}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "CharTokenizer":
        return cls(**config)


@pytest.fixture
def char_tokenizer() -> CharTokenizer:
    return CharTokenizer()


@pytest.fixture
def make_char_tokenizer():
    return CharTokenizer


@pytest.fixture
def write_fasta():
    """write_fasta(path, {id: sequence}) -> path, with a description after each id."""

    def write(path, records: dict[str, str]):
        path.write_text("".join(f">{name} desc of {name}\n{sequence}\n" for name, sequence in records.items()))
        return path

    return write
