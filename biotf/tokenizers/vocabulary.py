"""Shared plumbing of biotf's own vocabulary schemes (protein, dna, smiles).

Each holds a fixed token list (id = position) and implements one vectorised `_content(texts,
records, stats)` that returns the flat content ids of a batch and the number of ids per text;
everything else in the interface (`encode_batch` with `<cls>`/`<eos>`, `encode`, `tokenize`,
`decode`, the vocabulary) is the same for all three and lives here.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from biotf.tokenizers._arrays import assemble_flat, cut
from biotf.tokenizers.base import PolicyStats, Tokenizer


class VocabularyTokenizer(Tokenizer):
    """A `Tokenizer` over a fixed token list whose fast path is `_content` (numpy over a whole batch)."""

    _tokens: list[str]
    _vocab: dict[str, int]

    def _set_vocabulary(self, tokens: Iterable[str]) -> None:
        self._tokens = list(tokens)
        self._vocab = {token: i for i, token in enumerate(self._tokens)}

    @abstractmethod
    def _content(self, texts: Sequence[str], records: Sequence[str] | None,
                 stats: PolicyStats | None) -> tuple[np.ndarray, np.ndarray] | tuple[np.ndarray, np.ndarray, Any]:
        """(flat content ids of the batch without specials, ids per text[, scheme extras])."""

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = True,
                     records: Sequence[str] | None = None, stats: PolicyStats | None = None) -> list[np.ndarray]:
        """One int32 array per text, `<cls>` ... `<eos>` around each when `add_special_tokens`."""
        return cut(*self.encode_flat(texts, add_special_tokens, records, stats))

    def encode_flat(self, texts: Sequence[str], add_special_tokens: bool = True,
                    records: Sequence[str] | None = None,
                    stats: PolicyStats | None = None) -> tuple[np.ndarray, np.ndarray]:
        ids, counts = self._content(texts, records, stats)[:2]
        return assemble_flat(ids, counts, *(self.cls_id, self.eos_id) if add_special_tokens else (None, None))

    def encode(self, text: str, add_special_tokens: bool = True, record: str | None = None,
               stats: PolicyStats | None = None) -> list[int]:
        records = None if record is None else [record]
        return self.encode_batch([text], add_special_tokens, records=records, stats=stats)[0].tolist()

    def tokenize(self, text: str, record: str | None = None) -> list[str]:
        return [self._tokens[i] for i in self.encode(text, add_special_tokens=False, record=record)]

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        skip = self.special_ids if skip_special_tokens else frozenset()
        return "".join(self._tokens[i] for i in map(int, ids) if i not in skip)

    @property
    def vocab_size(self) -> int:
        return len(self._tokens)

    def get_vocab(self) -> dict[str, int]:
        return dict(self._vocab)

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "VocabularyTokenizer":
        return cls(**config)

    def __repr__(self) -> str:
        options = ", ".join(f"{key}={value!r}" for key, value in self.to_config().items() if key != "vocab")
        return f"{type(self).__name__}(vocab_size={self.vocab_size}, {options})"
