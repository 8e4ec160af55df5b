"""Building tokenizers from config, and loading saved ones.

- `build_tokenizer(config, texts=..., files=...)`: what training and the CLI call with Hydra's
  `conf/tokenizer/<name>.yaml` (a plain mapping: `kind` plus the scheme's options).
- `load_tokenizer(path)`: a directory or `tokenizer.json` written by biotf (any registered kind,
  plugins included) or by Hugging Face (any HF tokenizer, wrapped as `BPETokenizer`).

How a kind is recorded: biotf's own schemes write `{"biotf_tokenizer": kind, "fingerprint": ...,
"config": {...}}` to `tokenizer.json`; BPE writes Hugging Face's own `tokenizer.json` (+
`tokenizer_config.json`) so that `transformers` can load it, and any file with Hugging Face's
`"model"` section is read as `bpe`.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import shutil
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from biotf.errors import ConfigError, InputError
from biotf.tokenizers.base import TOKENIZER_FILE, Tokenizer, check_options, registered_tokenizers, tokenizer_class
from biotf.tokenizers.bpe import BPETokenizer
from biotf.tokenizers.hf_tokenizer_directory import VOCABULARY_FILES, read_hf_tokenizer
from biotf.untrusted import parse_json_object, read_text
from biotf.naming import parameter


def _plain(value: Any) -> Any:
    """Mappings and lists (e.g. OmegaConf's DictConfig / ListConfig) as plain dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [_plain(v) for v in value]
    return value


def build_tokenizer(config: Mapping[str, Any], *, texts: Iterable[str] | None = None,
                    files: Sequence[str | Path] | None = None) -> Tokenizer:
    """The tokenizer `config` describes: `{"kind": <registered name>, **options}`.

    The options are the scheme's constructor arguments (a Hydra YAML mirrors them one to one);
    an unknown kind or option is a ConfigError naming the key and the allowed values.

    Schemes whose vocabulary is learned use the training data passed here:
    - `smiles` with `vocab: null` learns its vocabulary from `texts` (SMILES strings) with
      `SmilesTokenizer.train(texts, min_frequency)`; without `texts` it uses the regex's base tokens.
    - `bpe` loads `path` when set (any biotf or Hugging Face tokenizer directory / tokenizer.json);
      otherwise it trains byte-level BPE with `vocab_size`, `min_frequency` and `special_tokens`
      on `files` (`BPETokenizer.train`) or `texts` (`BPETokenizer.train_from_texts`).
    Training code passes its training split's texts (or files) every time; kinds with a fixed
    vocabulary ignore them.
    """
    cls, options = _scheme(config)
    if _loads_path(cls, options):
        return load_tokenizer(options["path"])
    return cls.build(options, texts=texts, files=files)


def with_options(tokenizer: Tokenizer, options: Mapping[str, Any]) -> Tokenizer:
    """`tokenizer` with some of its policies changed (`policy_options`: `unknown="to_unk"`, `stop="strip_terminal"`,
    ... for a trained model's tokenizer). Any other option is refused: the vocabulary and how valid text is cut into
    tokens are what the model's embedding rows mean. A policy may change the fingerprint (`stop="strip_terminal"`
    drops a trailing `*`, so that text gets other ids); the tokenizer returned carries its own fingerprint."""
    options = _plain(options)
    if not options:
        return tokenizer
    cls = type(tokenizer)
    known = cls.config_options()
    for key, value in options.items():
        if key in cls.policy_options:
            continue
        if known is not None and key not in known:
            reason = f"not an option of tokenizer {tokenizer.kind!r}"
        else:
            reason = (f"not a policy of the {tokenizer.scheme} tokenizer; an option that changes the vocabulary or how "
                      "text is cut into tokens cannot change under a trained model")
        raise ConfigError(f"tokenizer.{key}", value, allowed=", ".join(cls.policy_options) or "none", reason=reason)
    changed = cls.from_config({**tokenizer.to_config(), **options})
    if changed.get_vocab() != tokenizer.get_vocab():  # a plugin's policy must keep the vocabulary too
        raise ConfigError("tokenizer", dict(options), reason=f"changes the vocabulary of the {tokenizer.scheme} "
                          "tokenizer the model was trained with; only policies that keep it can change")
    return changed


def parse_options(pairs: Iterable[str]) -> dict[str, Any]:
    """`--option KEY=VALUE` pairs as tokenizer options; values are read as JSON where they parse (6 -> int,
    true -> bool), else as strings."""
    options = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        if not equals or not key:
            raise ConfigError(parameter("tokenizer_options"), pair, allowed="KEY=VALUE")
        try:
            options[key] = json.loads(value)
        except (ValueError, RecursionError):  # not JSON (or nested past the parser): the string as given
            options[key] = value
    return options


@contextlib.contextmanager
def option_errors(options: Mapping[str, Any], key_format: str) -> Iterator[None]:
    """A tokenizer's ConfigError about one of the user's `options` names it as the user gave it:
    `key_format.format(key)`, e.g. "--option {}" or "finetune.tokenizer_options.{}"."""
    try:
        yield
    except ConfigError as error:
        key = error.key.removeprefix("tokenizer.")
        if key not in options:
            raise
        raise ConfigError(key_format.format(key), error.value, error.allowed, error.reason) from None


def check_tokenizer_config(config: Mapping[str, Any]) -> None:
    """Refuse an unknown kind, option or option value (ConfigError naming the key and the allowed
    values) without reading any data: what training calls at startup."""
    cls, options = _scheme(config)
    if _loads_path(cls, options):
        load_tokenizer(options["path"])  # it must load now
        return
    cls.check_config(options)


def _loads_path(cls: type[Tokenizer], options: Mapping[str, Any]) -> bool:
    """Whether `options` name a saved tokenizer to load instead of a scheme to build: `bpe`'s `path` (any biotf or
    Hugging Face tokenizer directory / tokenizer.json), loaded here because loading reads every kind."""
    return issubclass(cls, BPETokenizer) and bool(options.get("path"))


def _scheme(config: Mapping[str, Any]) -> tuple[type[Tokenizer], dict[str, Any]]:
    """The scheme class and plain options of `config`, after refusing an unknown kind or option name."""
    options = _plain(config)
    if not isinstance(options, dict):
        raise ConfigError("tokenizer", config, reason="expected a mapping with a 'kind' key")
    kind = options.pop("kind", None)
    if kind is None:
        raise ConfigError("tokenizer.kind", None, allowed=", ".join(registered_tokenizers()))
    try:
        cls = tokenizer_class(kind)
    except ConfigError as error:
        raise ConfigError("tokenizer.kind", kind, allowed=error.allowed) from None
    check_options(cls, options)
    return cls, options


def unpacked_copy(source: str | Path, target: str | Path) -> Path:
    """Copy the tokenizer directory `source` into `target`, decompressing `*.gz` files (a shipped
    `tokenizer.json.gz`), so that both `load_tokenizer` and `transformers` can load the copy; returns `target`."""
    target = Path(target)
    target.mkdir(parents=True, exist_ok=True)
    for item in Path(source).iterdir():
        if item.suffix == ".gz":
            with gzip.open(item, "rb") as compressed, open(target / item.stem, "wb") as plain:
                shutil.copyfileobj(compressed, plain)
        elif item.is_file():
            shutil.copy(item, target / item.name)
    return target


def load_tokenizer(path: str | Path | Tokenizer) -> Tokenizer:
    """The tokenizer saved at `path` (a directory holding `tokenizer.json`, or the file itself). A Hugging Face
    directory without tokenizer.json (vocab.txt, vocab.json + merges.txt, tokenizer.model) is read as
    `transformers` reads it (`hf_directory.read_hf_tokenizer`)."""
    if isinstance(path, Tokenizer):
        return path
    path = Path(path)
    if path.is_dir():
        file = path / TOKENIZER_FILE
        if not file.is_file():
            if any((path / name).is_file() for name in VOCABULARY_FILES):  # a hub directory without tokenizer.json
                return read_hf_tokenizer(path)
            raise InputError(f"{path} has no {TOKENIZER_FILE}: not a biotf or Hugging Face tokenizer directory")
    elif path.is_file():
        file = path
    else:
        raise InputError(f"tokenizer path {path} does not exist")
    text = read_text(file, "tokenizer file")
    # biotf's own fields; a Hugging Face file's are checked by `tokenizers` as it reads it.
    data = parse_json_object(text, str(file), "tokenizer file",
                             types={"biotf_tokenizer": str, "config": dict, "fingerprint": str})
    if "biotf_tokenizer" in data:
        kind = data["biotf_tokenizer"]
        try:
            cls = tokenizer_class(kind)
        except ConfigError as error:
            raise InputError(f"{file} was saved by tokenizer kind {kind!r}, which is not registered here "
                             f"(is its plugin installed?): {error}") from None
        try:
            tokenizer = cls.from_config(data.get("config", {}))
        except (ConfigError, TypeError) as error:
            raise InputError(f"{file}: invalid {kind!r} tokenizer config: {error}") from None
        saved = data.get("fingerprint")
        if saved is not None and saved != tokenizer.fingerprint:
            raise InputError(f"{file}: fingerprint {saved} does not match the tokenizer it describes "
                             f"({tokenizer.fingerprint}); the file was edited or written by an incompatible version")
        return tokenizer
    if "model" in data:
        return BPETokenizer._from_hf_json(text, file)
    raise InputError(f"{file} is neither a biotf tokenizer (no 'biotf_tokenizer' key) nor a Hugging Face "
                     "tokenizer.json (no 'model' section)")
