"""The one tokenizer interface every scheme implements, and the registry that makes schemes pluggable.

A scheme is a `Tokenizer` subclass registered under a name with `@register_tokenizer("name")`
(or a `biotf.tokenizers` Python entry point). The name is what users select:
`tokenizer=<name>` in Hydra, `--tokenizer <name>` on the command line, and what `save()` records
so that `load_tokenizer(directory)` rebuilds the right kind.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from biotf.errors import BiotfError, ConfigError

TOKENIZER_FILE = "tokenizer.json"
# The roles a special token plays (`Tokenizer.<role>_id`).
ROLES = ("pad", "unk", "mask", "cls", "bos", "eos")


class PolicyStats(Counter):
    """Counts of what character policies changed while encoding, e.g. {"rare_to_X": 3, "lowercase_folded": 120}.

    Passed to `encode_batch(..., stats=...)` and summed across batches; printed by `biotf tokenize`
    and written into run summaries so no policy ever changes data silently.
    """

    def summary(self) -> str:
        return ", ".join(f"{key}={count}" for key, count in sorted(self.items())) or "nothing changed"


class Tokenizer(ABC):
    """Shared interface: text <-> token strings <-> ids, with explicit character policies.

    Subclasses set `kind` (their registry name, set by `register_tokenizer`) and implement the
    abstract methods. Special-token ids are `None` where the scheme has no such token.
    """

    kind: ClassVar[str] = ""
    # Options that decide only what happens to unusual input (a character outside the alphabet, a stop codon,
    # whitespace), never the vocabulary or how valid text is cut: those a trained model's tokenizer may change
    # (`loading.with_options`, `--option`, `finetune.tokenizer_options`).
    policy_options: ClassVar[tuple[str, ...]] = ()

    pad_id: int | None = None
    unk_id: int | None = None
    mask_id: int | None = None
    cls_id: int | None = None
    bos_id: int | None = None
    eos_id: int | None = None

    # --- core -----------------------------------------------------------------------------
    @abstractmethod
    def tokenize(self, text: str, record: str | None = None) -> list[str]:
        """Token strings of `text` after policies, without special tokens."""

    @abstractmethod
    def encode(self, text: str, add_special_tokens: bool = True, record: str | None = None) -> list[int]:
        """Ids of `text`; `record` names the sequence in error messages."""

    def encode_batch(
        self,
        texts: Sequence[str],
        add_special_tokens: bool = True,
        records: Sequence[str] | None = None,
        stats: PolicyStats | None = None,
    ) -> list[np.ndarray]:
        """Fast path: one int array per text. Subclasses override with vectorised code."""
        names = records if records is not None else [None] * len(texts)
        return [np.asarray(self.encode(t, add_special_tokens, record=r), dtype=np.int32) for t, r in zip(texts, names)]

    def encode_flat(
        self,
        texts: Sequence[str],
        add_special_tokens: bool = True,
        records: Sequence[str] | None = None,
        stats: PolicyStats | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """`encode_batch`'s arrays joined into one, and each text's number of ids: for callers that store a batch
        as one array (the token cache). Schemes whose fast path builds the joined array return it directly."""
        encoded = self.encode_batch(texts, add_special_tokens, records=records, stats=stats)
        lengths = np.fromiter(map(len, encoded), np.int64, len(encoded))
        return (np.concatenate(encoded) if encoded else np.zeros(0, np.int32)), lengths

    @abstractmethod
    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        """Text of `ids`; exact inverse of `encode` where the scheme is reversible."""

    def count_residues(self, text: str) -> int:
        """The residues (characters) of a sequence `text`; a scheme that reads spaces typed between residues as its
        convention leaves them out."""
        return len(text)

    @property
    def input_convention(self) -> dict[str, str]:
        """How plain text is typed before the scheme reads it, for an output's info; {} where it is read as given."""
        return {}

    @property
    def scheme(self) -> str:
        """What messages call the tokenizer ("the {scheme} tokenizer"): its kind, unless the kind wraps several
        schemes (`bpe` wraps any Hugging Face pipeline: WordPiece, byte-level BPE, SentencePiece-BPE, Unigram)."""
        return self.kind

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of ids the tokenizer can produce (the embedding table needs at least this many rows)."""

    @abstractmethod
    def get_vocab(self) -> dict[str, int]:
        """Token string -> id for every token."""

    # --- persistence ----------------------------------------------------------------------
    @abstractmethod
    def to_config(self) -> dict[str, Any]:
        """Plain JSON-able options that rebuild this tokenizer with `from_config` (vocab included if learned)."""

    @classmethod
    @abstractmethod
    def from_config(cls, config: dict[str, Any]) -> "Tokenizer":
        """Inverse of `to_config`."""

    @classmethod
    def build(cls, options: dict[str, Any], texts: Iterable[str] | None = None,
              files: Sequence[str | Path] | None = None) -> "Tokenizer":
        """Construct from config options (`conf/tokenizer/<name>.yaml` without `kind`).

        The default passes the options to the constructor, refusing names it does not take.
        Schemes with a learned vocabulary override this to train on `texts` / `files`.
        """
        check_options(cls, options)
        return cls(**options)

    @classmethod
    def check_config(cls, options: dict[str, Any]) -> None:
        """Refuse a bad option value without training data (training calls this at startup).

        The default builds the tokenizer without data (cheap for a fixed or base vocabulary) and drops
        it; schemes whose build is costly or needs the data override it."""
        cls.build(options)

    @classmethod
    def config_options(cls) -> list[str] | None:
        """The option names `build` accepts (a config's keys besides `kind`); None when it takes any.

        The default is the constructor's parameters; schemes whose `build` takes others override it.
        Training checks a config's options with this before any data is read."""
        parameters = inspect.signature(cls.__init__).parameters
        if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            return None
        return [name for name in parameters if name != "self"]

    def save(self, directory: str | Path) -> Path:
        """Write `tokenizer.json` into `directory` (created if needed); returns its path."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / TOKENIZER_FILE
        payload = {"biotf_tokenizer": self.kind, "fingerprint": self.fingerprint, "config": self.to_config()}
        path.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return path

    def to_hf(self):
        """A `transformers.PreTrainedTokenizerFast` giving identical ids (schemes that cannot, raise BiotfError)."""
        raise BiotfError(f"tokenizer {self.kind!r} has no Hugging Face equivalent")

    # --- identity -------------------------------------------------------------------------
    def identity_config(self) -> dict[str, Any]:
        """The part of `to_config` that decides the ids, which `fingerprint` hashes: all of it by default.
        A scheme leaves out an option whose value gives the same ids as before the option existed, so that
        adding a policy keeps the fingerprints stored in existing checkpoints."""
        return self.to_config()

    @property
    def fingerprint(self) -> str:
        """Stable hash of everything that decides the ids: kind, options and vocabulary (`identity_config`)."""
        blob = json.dumps({"kind": self.kind, "config": self.identity_config()}, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids never to be masked, pooled or predicted as content."""
        ids = (self.pad_id, self.unk_id, self.mask_id, self.cls_id, self.bos_id, self.eos_id)
        return frozenset(i for i in ids if i is not None) - ({self.unk_id} if self.unk_id is not None else set())

    def __len__(self) -> int:
        return self.vocab_size


def check_options(cls: type[Tokenizer], options: Mapping[str, Any]) -> None:
    """ConfigError for any option `cls.build` does not take (`config_options`), naming the allowed ones."""
    allowed = cls.config_options()
    if allowed is None:
        return
    for key, value in options.items():
        if key not in allowed:
            raise ConfigError(f"tokenizer.{key}", value, reason=f"not an option of tokenizer {cls.kind!r}",
                              allowed=", ".join(allowed))


_REGISTRY: dict[str, type[Tokenizer]] = {}


def register_tokenizer(name: str) -> Callable[[type[Tokenizer]], type[Tokenizer]]:
    """Class decorator: make a `Tokenizer` subclass selectable as `name` everywhere."""

    def decorate(cls: type[Tokenizer]) -> type[Tokenizer]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise BiotfError(f"tokenizer name {name!r} is already registered by {_REGISTRY[name].__qualname__}")
        cls.kind = name
        _REGISTRY[name] = cls
        return cls

    return decorate


def _load_entry_points() -> None:
    from importlib.metadata import entry_points

    for entry in entry_points(group="biotf.tokenizers"):
        if entry.name not in _REGISTRY:
            register_tokenizer(entry.name)(entry.load())


def tokenizer_class(name: str) -> type[Tokenizer]:
    """The registered class for `name`; error names the allowed values."""
    if name not in _REGISTRY:
        _load_entry_points()
    if name not in _REGISTRY:
        raise ConfigError("tokenizer", name, allowed=", ".join(sorted(_REGISTRY)))
    return _REGISTRY[name]


def registered_tokenizers() -> list[str]:
    _load_entry_points()
    return sorted(_REGISTRY)
