"""Byte-level BPE on Hugging Face `tokenizers`, and the wrapper for any Hugging Face tokenizer.

`BPETokenizer` holds a `tokenizers.Tokenizer` (the engine: encode/decode run in Rust, so biotf
adds nothing to their cost) plus what `tokenizer_config.json` says around it: which tokens play
the pad/unk/mask/cls/bos/eos roles and the chat template.

- `BPETokenizer.train(files, vocab_size, special_tokens)` / `train_from_texts(texts, ...)` learn
  byte-level BPE (GPT-2 style byte alphabet, so no input is ever unknown) on text, DNA
  (DNABERT-2-style) or SMILES corpora. `encode` starts each sequence with the cls (else bos)
  token and ends it with the eos token, where the specials have them.
- `BPETokenizer.from_file(".../tokenizer.json")` and `load_tokenizer(directory)` read ANY Hugging
  Face tokenizer (e.g. Qwen2.5's), with roles and chat template from `tokenizer_config.json` and
  `chat_template.jinja` beside it when present.
- `hf_directory.read_hf_tokenizer(directory)` reads a checkpoint's tokenizer as `transformers`' AutoTokenizer
  does (GPT-2, BERT, RoBERTa, BLOOM, Llama, Mistral: tokenizer.json, vocab.txt, vocab.json + merges.txt) into
  this class: WordPiece and SentencePiece-style BPE too, not only byte-level BPE.
- `save(directory)` writes Hugging Face's own files (`tokenizer.json`, `tokenizer_config.json`),
  so `transformers.AutoTokenizer.from_pretrained(directory)` loads it too; biotf recognises it as
  `bpe` because it is a Hugging Face `tokenizer.json` (biotf's other kinds write a
  `{"biotf_tokenizer": kind, ...}` file instead).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from biotf.errors import ConfigError, InputError, TokenizationError, check_int
from biotf.tokenizers.base import ROLES, TOKENIZER_FILE, PolicyStats, Tokenizer, check_options, register_tokenizer
from biotf.tokenizers.spacing import SPACING_OPTION, Spacing
from biotf.untrusted import read_json_object, read_text

TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
# tokenizer_config.json's keys for a convention set explicitly (`spacing`), which `transformers` ignores.
SAVED_CONVENTION = {SPACING_OPTION: "biotf_spacing", "rare_residues": "biotf_rare_residues"}
CHAT_TEMPLATE_FILE = "chat_template.jinja"
DEFAULT_SPECIAL_TOKENS = {"pad": "<pad>", "unk": "<unk>", "cls": "<cls>", "eos": "<eos>", "mask": "<mask>"}
# Roles of well-known special-token spellings, for `special_tokens` given as a plain list.
_KNOWN_ROLES = {
    "<pad>": "pad", "[PAD]": "pad", "<unk>": "unk", "[UNK]": "unk", "<mask>": "mask", "[MASK]": "mask",
    "<cls>": "cls", "[CLS]": "cls", "<s>": "bos", "<bos>": "bos", "<|startoftext|>": "bos",
    "</s>": "eos", "<eos>": "eos", "[SEP]": "eos", "<|endoftext|>": "eos",
}


def special_token_roles(special_tokens: Mapping[str, str] | Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """(all special tokens in order, role -> token). A mapping names roles; a list gets roles by spelling."""
    if isinstance(special_tokens, Mapping):
        unknown = sorted(set(special_tokens) - set(ROLES))
        if unknown:
            raise ConfigError("tokenizer.special_tokens", unknown[0], allowed=", ".join(ROLES))
        roles = {role: token for role, token in special_tokens.items() if token is not None}
        return list(dict.fromkeys(roles.values())), roles
    tokens = list(dict.fromkeys(special_tokens))
    roles: dict[str, str] = {}
    for token in tokens:
        role = _KNOWN_ROLES.get(token)
        if role and role not in roles:
            roles[role] = token
    return tokens, roles


def _token_content(value: Any) -> str | None:
    """tokenizer_config.json writes a special token as a string or as {"content": ...}."""
    if isinstance(value, Mapping):
        return value.get("content")
    return value if isinstance(value, str) else None


def without_padding_or_truncation(backend):
    """`backend`, or a copy of it without the padding and truncation a tokenizer.json may carry (every
    sentence-transformers export pads and cuts to 128): `transformers` turns both off on the backend before it
    encodes (`no_padding()` / `no_truncation()` unless asked to pad or truncate), and so does biotf, whose batches pad
    themselves and whose long records follow their `long` policy. A pipeline without either is kept as it is, so its
    JSON, hence its fingerprint, stays the same."""
    if backend.padding is None and backend.truncation is None:
        return backend
    from tokenizers import Tokenizer as HFTokenizer

    copy = HFTokenizer.from_str(backend.to_str())  # the caller's tokenizer object is left as it was
    copy.no_padding()
    copy.no_truncation()
    return copy


def pipeline_scheme(backend) -> str:
    """The scheme a `tokenizers` pipeline implements, by its model type and, for BPE, its pre-tokenizer and decoder:
    byte-level BPE (GPT-2, RoBERTa, Qwen), SentencePiece-BPE (Llama, Mistral: `▁` spaces, byte fallback), or
    WordPiece (BERT), Unigram (T5, ALBERT), word-level."""
    model = type(backend.model).__name__
    if model != "BPE":
        return {"WordLevel": "word-level"}.get(model, model)
    steps = f"{backend.pre_tokenizer!r} {backend.decoder!r}"
    if re.search(r"\bByteLevel\(", steps):
        return "byte-level BPE"
    if backend.model.byte_fallback or re.search(r"\b(Metaspace|ByteFallback)\(", steps):
        return "SentencePiece-BPE"
    return "BPE"


@register_tokenizer("bpe")
class BPETokenizer(Tokenizer):
    """A Hugging Face `tokenizers.Tokenizer` (byte-level BPE, or any other) behind biotf's interface.

    `spacing` and `rare_residues` say how a plain sequence is typed for a vocabulary that reads words separated by
    spaces (ProtBert's "M K T A Y", DNABERT's k-mers): `biotf.tokenizers.spacing`."""

    policy_options = (SPACING_OPTION, "rare_residues")

    def __init__(self, tokenizer, special_tokens: Mapping[str, str] | None = None, chat_template: str | None = None,
                 clean_up_tokenization_spaces: bool = False, spacing: str = "auto", rare_residues: str = "keep"):
        from tokenizers import Tokenizer as HFTokenizer

        if isinstance(tokenizer, str):
            tokenizer = HFTokenizer.from_str(tokenizer)
        elif isinstance(tokenizer, Mapping):
            tokenizer = HFTokenizer.from_str(json.dumps(tokenizer))
        self._tk = without_padding_or_truncation(tokenizer)
        self.chat_template = chat_template
        self.clean_up_tokenization_spaces = bool(clean_up_tokenization_spaces)
        self.special_tokens = dict(special_tokens or {})
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        for role, token in self.special_tokens.items():
            if role not in ROLES:
                raise ConfigError("tokenizer.special_tokens", role, allowed=", ".join(ROLES))
            if token not in vocab:
                raise ConfigError(f"tokenizer.special_tokens.{role}", token, reason="not in the vocabulary")
            setattr(self, f"{role}_id", vocab[token])
        self._vocab_size = max(vocab.values()) + 1 if vocab else 0
        self.spacing = Spacing.of(self._tk, vocab, self.unk_id, list(self.special_tokens.values()), spacing,
                                  rare_residues)
        self._fingerprint: str | None = None
        self._hf = None

    # --- construction -----------------------------------------------------------------------
    @classmethod
    def _new_trainable(cls, vocab_size: int, min_frequency: int, special_tokens):
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, pre_tokenizers, trainers

        if not isinstance(vocab_size, int) or vocab_size < 257:
            raise ConfigError("tokenizer.vocab_size", vocab_size, allowed="an integer >= 257 (256 bytes + merges)")
        check_int("tokenizer.min_frequency", min_frequency)
        tokens, roles = special_token_roles(DEFAULT_SPECIAL_TOKENS if special_tokens is None else special_tokens)
        backend = HFTokenizer(models.BPE())
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=tokens,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        return backend, trainer, roles

    @classmethod
    def _finish_training(cls, backend, roles: dict[str, str]) -> "BPETokenizer":
        from tokenizers import processors

        first, eos = roles.get("cls") or roles.get("bos"), roles.get("eos")
        if first or eos:
            single = " ".join(t for t in (first, "$A", eos) if t)
            pair = single + " " + " ".join(f"{t}:1" for t in ("$B", eos) if t)
            backend.post_processor = processors.TemplateProcessing(
                single=single, pair=pair, special_tokens=[(t, backend.token_to_id(t)) for t in (first, eos) if t])
        return cls(backend, special_tokens=roles)

    @classmethod
    def train(cls, files: Sequence[str | Path], vocab_size: int,
              special_tokens: Mapping[str, str] | Sequence[str] | None = None,
              min_frequency: int = 2) -> "BPETokenizer":
        """Learn byte-level BPE from text files (one or more; every line is training text).

        `special_tokens`: role -> token (e.g. {"pad": "<pad>", "eos": "<eos>"}) or a list whose
        well-known spellings get roles; default `DEFAULT_SPECIAL_TOKENS`. They take the first ids.
        """
        files = [str(f) for f in files]
        for file in files:
            if not Path(file).is_file():
                raise InputError(f"BPE training file {file} does not exist")
        backend, trainer, roles = cls._new_trainable(vocab_size, min_frequency, special_tokens)
        backend.train(files, trainer)
        return cls._finish_training(backend, roles)

    @classmethod
    def train_from_texts(cls, texts: Iterable[str], vocab_size: int,
                         special_tokens: Mapping[str, str] | Sequence[str] | None = None,
                         min_frequency: int = 2) -> "BPETokenizer":
        """`train` on an iterable of texts (e.g. the sequences of a FASTA file) instead of files."""
        backend, trainer, roles = cls._new_trainable(vocab_size, min_frequency, special_tokens)
        backend.train_from_iterator(texts, trainer)
        return cls._finish_training(backend, roles)

    @classmethod
    def from_file(cls, path: str | Path) -> "BPETokenizer":
        """Any Hugging Face `tokenizer.json`, with `tokenizer_config.json` / `chat_template.jinja` beside it."""
        path = Path(path)
        return cls._from_hf_json(read_text(path, "tokenizer file"), path)

    @classmethod
    def _from_hf_json(cls, text: str, path: Path) -> "BPETokenizer":
        from tokenizers import Tokenizer as HFTokenizer

        try:
            backend = HFTokenizer.from_str(text)
        except Exception as error:  # tokenizers raises a bare Exception on bad JSON
            raise InputError(f"{path} is not a Hugging Face tokenizer.json: {error}") from None
        config: dict[str, Any] = {}
        config_path = path.parent / TOKENIZER_CONFIG_FILE
        if config_path.is_file():
            config = read_json_object(config_path, "tokenizer config", types={"chat_template": (str, list, type(None))})
        vocab = backend.get_vocab(with_added_tokens=True)
        roles = {}
        for role in ROLES:
            token = _token_content(config.get(f"{role}_token"))
            if token is not None and token in vocab:
                roles[role] = token
        chat_template = config.get("chat_template")
        template_path = path.parent / CHAT_TEMPLATE_FILE
        if chat_template is None and template_path.is_file():
            chat_template = template_path.read_text(encoding="utf-8")
        if isinstance(chat_template, list):  # several named templates: keep the default one
            chat_template = next((t.get("template") for t in chat_template
                                  if isinstance(t, Mapping) and t.get("name") == "default"), None)
        convention = {option: config[key] for option, key in SAVED_CONVENTION.items() if key in config}
        return cls(backend, special_tokens=roles, chat_template=chat_template,
                   clean_up_tokenization_spaces=cleans_up_spaces(backend, config), **convention)

    @classmethod
    def check_config(cls, options: dict[str, Any]) -> None:
        """A `path` is loaded by `loading.check_tokenizer_config`; the training options are HF's to check once the
        data is there."""

    @classmethod
    def config_options(cls) -> list[str]:
        return ["path", "vocab_size", "min_frequency", "special_tokens"]

    @classmethod
    def build(cls, options: dict[str, Any], texts: Iterable[str] | None = None,
              files: Sequence[str | Path] | None = None) -> Tokenizer:
        """From config: train (`vocab_size`, `min_frequency`, `special_tokens`) on `files`, or on `texts`. A `path`
        (any saved tokenizer) is loaded by `loading.build_tokenizer` instead, which never calls this."""
        check_options(cls, options)
        training = {"vocab_size": options.get("vocab_size", 4096), "min_frequency": options.get("min_frequency", 2),
                    "special_tokens": options.get("special_tokens")}
        if files:
            return cls.train(files, **training)
        if texts is not None:
            return cls.train_from_texts(texts, **training)
        raise ConfigError("tokenizer.path", None, reason="a BPE tokenizer needs a path to load, or training data "
                          "(build_tokenizer(config, texts=...) or files=...)")

    # --- core -----------------------------------------------------------------------------
    def tokenize(self, text: str, record: str | None = None) -> list[str]:
        return [self._tk.id_to_token(i) for i in self.encode(text, add_special_tokens=False, record=record)]

    def encode(self, text: str, add_special_tokens: bool = True, record: str | None = None,
               stats: PolicyStats | None = None) -> list[int]:
        return self.encode_batch([text], add_special_tokens, None if record is None else [record], stats)[0].tolist()

    def encode_batch(self, texts: Sequence[str], add_special_tokens: bool = True,
                     records: Sequence[str] | None = None, stats: PolicyStats | None = None) -> list[np.ndarray]:
        """HF's parallel batch encoder, on the texts typed as `spacing` says. Byte-level BPE represents every valid
        string; a vocabulary with an unknown token (WordPiece: BERT, ProtBert, DNABERT) gives it for a word it cannot
        cut, as `transformers` does, counted in `stats` as `unknown_to_unk`."""
        texts = self.spacing.type_texts(texts, records, stats)
        arrays = [np.array(e.ids, dtype=np.int32) for e in self._encodings(texts, add_special_tokens, records)]
        if stats is not None and self.unk_id is not None:
            unknown = sum(int(np.count_nonzero(ids == self.unk_id)) for ids in arrays)
            if unknown:
                stats["unknown_to_unk"] += unknown
        return arrays

    def _encodings(self, texts: Sequence[str], add_special_tokens: bool, records: Sequence[str] | None) -> list:
        """HF encodings of `texts`. The one string byte-level BPE cannot encode holds a lone surrogate (no
        UTF-8 bytes; `surrogateescape` makes them of undecodable input): a TokenizationError naming it,
        looked for only after HF refuses, so the normal path pays nothing."""
        try:
            return self._tk.encode_batch_fast(list(texts), add_special_tokens=add_special_tokens)
        except TypeError:
            for item, text in enumerate(texts):
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError as error:
                    raise TokenizationError(text[error.start], error.start,
                                            record=None if records is None else str(records[item]),
                                            detail="a lone surrogate has no UTF-8 bytes for byte-level BPE") from None
            raise

    def count_residues(self, text: str) -> int:
        return self.spacing.count_residues(text)

    @property
    def input_convention(self) -> dict[str, str]:
        return self.spacing.describe()

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = True) -> str:
        text = self._tk.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)
        return clean_up_tokenization(text) if self.clean_up_tokenization_spaces else text

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = False,
                            tokenize: bool = True, **kwargs: Any):
        """Render `messages` with the chat template (as `transformers` does); ids when `tokenize`."""
        if not self.chat_template:
            raise ConfigError("tokenizer.chat_template", None, reason="this tokenizer has no chat template")
        rendered = self.to_hf().apply_chat_template(messages, add_generation_prompt=add_generation_prompt,
                                                    tokenize=False, **kwargs)
        return self.encode(rendered, add_special_tokens=False) if tokenize else rendered

    @property
    def backend(self):
        """The wrapped `tokenizers.Tokenizer`."""
        return self._tk

    @property
    def scheme(self) -> str:
        """The wrapped pipeline's scheme (`pipeline_scheme`): "WordPiece", "byte-level BPE", ..."""
        return pipeline_scheme(self._tk)

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    @property
    def special_ids(self) -> frozenset[int]:
        """The role tokens (but unk) and every added token HF marks special (e.g. Qwen's `<|im_start|>`)."""
        added = {i for i, token in self._tk.get_added_tokens_decoder().items() if token.special}
        return super().special_ids | (frozenset(added) - {self.unk_id})

    def get_vocab(self) -> dict[str, int]:
        return self._tk.get_vocab(with_added_tokens=True)

    # --- persistence ----------------------------------------------------------------------
    def to_config(self) -> dict[str, Any]:
        return {"tokenizer": json.loads(self._tk.to_str()), "special_tokens": dict(self.special_tokens),
                "chat_template": self.chat_template, "clean_up_tokenization_spaces": self.clean_up_tokenization_spaces,
                **self._set_convention()}

    def _set_convention(self) -> dict[str, str]:
        """The convention options set otherwise than their defaults (an "auto" spacing is detected again on load)."""
        options = {SPACING_OPTION: self.spacing.requested, "rare_residues": self.spacing.rare_residues}
        return {key: value for key, value in options.items() if value not in ("auto", "keep")}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "BPETokenizer":
        return cls(**config)

    @property
    def fingerprint(self) -> str:
        """Hash of the HF pipeline JSON (vocab, merges, normalizer, pre-tokenizer, post-processor,
        added tokens), the special-token roles, the chat template and how plain text is typed (only where it is
        typed otherwise than given, so that other tokenizers keep the fingerprints they had)."""
        if self._fingerprint is None:
            digest = hashlib.sha256(self._tk.to_str().encode("utf-8"))
            typed = {"spacing": self.spacing.mode, "rare_residues": self.spacing.rare_residues} \
                if self.spacing.changes_text else {}
            digest.update(json.dumps({"kind": self.kind, "special_tokens": self.special_tokens,
                                      "chat_template": self.chat_template, **typed}, sort_keys=True).encode("utf-8"))
            self._fingerprint = digest.hexdigest()[:16]
        return self._fingerprint

    def _hf_config(self) -> dict[str, Any]:
        config: dict[str, Any] = {"tokenizer_class": "PreTrainedTokenizerFast"}
        for role in ROLES:
            config[f"{role}_token"] = self.special_tokens.get(role)
        if self.chat_template:
            config["chat_template"] = self.chat_template
        config["clean_up_tokenization_spaces"] = self.clean_up_tokenization_spaces
        config.update({SAVED_CONVENTION[option]: value for option, value in self._set_convention().items()})
        return config

    def save(self, directory: str | Path) -> Path:
        """Hugging Face's files: `tokenizer.json` and `tokenizer_config.json` (roles, chat template)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / TOKENIZER_FILE
        self._tk.save(str(path))
        (directory / TOKENIZER_CONFIG_FILE).write_text(json.dumps(self._hf_config(), indent=2, ensure_ascii=False)
                                                       + "\n", encoding="utf-8")
        return path

    def to_hf(self):
        """`PreTrainedTokenizerFast` over a copy of the same pipeline (cached), roles and chat template included."""
        if self._hf is None:
            from tokenizers import Tokenizer as HFTokenizer
            from transformers import PreTrainedTokenizerFast

            config = self._hf_config()
            del config["tokenizer_class"]
            for key in SAVED_CONVENTION.values():
                config.pop(key, None)
            self._hf = PreTrainedTokenizerFast(tokenizer_object=HFTokenizer.from_str(self._tk.to_str()), **config)
        return self._hf

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self.vocab_size}, special_tokens={self.special_tokens})"


def cleans_up_spaces(backend, config: Mapping[str, Any]) -> bool:
    """Whether `transformers` decodes with `clean_up_tokenization` under tokenizer_config.json's `config`: when it
    says so, except for a BPE model (transformers skips it there: it would strip spaces the text had)."""
    if config.get("clean_up_tokenization_spaces") is not True:
        return False
    return type(backend.model).__name__ != "BPE" or \
        config.get("clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output") is True


def clean_up_tokenization(text: str) -> str:
    """What `transformers`' `PreTrainedTokenizerBase.clean_up_tokenization` does to decoded text: WordPiece decodes
    "a ." and "don ' t"; the spaces before punctuation and English contractions go."""
    for spaced, joined in ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
                           (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re")):
        text = text.replace(spaced, joined)
    return text
