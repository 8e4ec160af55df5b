"""A sentence-transformers directory's own pooling, so that `biotf embed` gives `SentenceTransformer(dir).encode`'s
vectors.

`SentenceTransformer.save` writes `modules.json`, the modules in order, each at a path of the directory:
- a Transformer (the Hugging Face checkpoint, at "" or a subdirectory such as `0_Transformer`), whose maximum length is
  `max_seq_length` in its `sentence_bert_config.json` (older sentence-transformers) or else its tokenizer's
  `model_max_length` (what sentence-transformers reads today); longer inputs are cut there;
- a Pooling (`1_Pooling/config.json`: `pooling_mode` "mean" | "cls" | "max", or the older `pooling_mode_mean_tokens`,
  `pooling_mode_cls_token`, `pooling_mode_max_tokens` flags). It pools every token of the attention mask, [CLS] and
  [SEP] included, where biotf's own pooling takes content tokens only: hence `pool_specials`;
- optionally a Normalize (unit L2 norm).
Anything else (a Dense module, a `mean_sqrt_len_tokens` / `weightedmean` / `lasttoken` pooling, several modes
concatenated, a default prompt, `do_lower_case`) would give other vectors than biotf computes, and is refused naming
it; an explicit `--pool` embeds with biotf's own pooling instead, reading only where the Transformer is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

from biotf.errors import InputError
from biotf.naming import parameter
from biotf.untrusted import contained, read_json_object, read_text

MODULES_FILE = "modules.json"
TRANSFORMER_CONFIG_FILE = "sentence_bert_config.json"
POOLING_CONFIG_FILE = "config.json"
MODEL_CONFIG_FILE = "config_sentence_transformers.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
POOLING_MODES = ("mean", "cls", "max")
# The older Pooling config's flags, by mode (sentence-transformers' own `_convert_legacy_pooling_kwargs` table).
LEGACY_POOLING_FLAGS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
                        "pooling_mode_mean_tokens": "mean", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
                        "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
UNSET_MAX_LENGTH = 10 ** 12  # transformers writes int(1e30) for a tokenizer without model_max_length


class SentencePooling(NamedTuple):
    """What a sentence-transformers directory asks of its embeddings: the Transformer module's directory (the
    model biotf loads), the pooling mode, whether vectors are normalised, and the length inputs are cut to."""

    model: Path
    pool: str
    normalize: bool
    max_length: int | None


def read_sentence_pooling(directory: Path) -> SentencePooling:
    """The pooling the sentence-transformers directory `directory` (one with modules.json) asks for."""
    modules = _modules(directory)
    kinds = [module["type"].rsplit(".", 1)[-1] for module in modules]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise InputError(f"{directory / MODULES_FILE} lists the modules {', '.join(kinds)}; biotf computes "
                         f"Transformer, Pooling and an optional Normalize only (pass {parameter('pool')} to embed with "
                         "biotf's own pooling)")
    model = directory / modules[0]["path"]
    _refuse_default_prompt(directory)
    return SentencePooling(model, _pooling_mode(directory / modules[1]["path"] / POOLING_CONFIG_FILE),
                           len(kinds) == 3, _max_length(model))


def _modules(directory: Path) -> list[dict[str, str]]:
    """modules.json's list of modules, each with a `type` and a `path` (relative to `directory`)."""
    path = directory / MODULES_FILE
    try:
        modules = json.loads(read_text(path, "sentence-transformers modules"))
    except ValueError as error:
        raise InputError(f"cannot read sentence-transformers modules {path}: not valid JSON ({error})") from None
    if not isinstance(modules, list) or not modules or not all(
            isinstance(m, dict) and isinstance(m.get("type"), str) and isinstance(m.get("path", ""), str)
            for m in modules):
        raise InputError(f"cannot read sentence-transformers modules {path}: expected a list of modules, each with "
                         "a 'type' and a 'path'")
    for module in modules:  # biotf reads below the directory only
        contained(directory, module.get("path", ""), path, "module path")
    return [{"type": m["type"], "path": m.get("path", "")} for m in modules]


def _pooling_mode(path: Path) -> str:
    config = read_json_object(path, "sentence-transformers pooling config",
                              types={**dict.fromkeys(LEGACY_POOLING_FLAGS, bool), "word_embedding_dimension": int})
    mode: Any = config.get("pooling_mode")
    if mode is None:  # the older flags
        mode = [name for flag, name in LEGACY_POOLING_FLAGS.items() if config.get(flag) is True]
    modes = [mode] if isinstance(mode, str) else mode
    if not isinstance(modes, list) or len(modes) != 1 or modes[0] not in POOLING_MODES:
        raise InputError(f"{path}: pooling mode {mode!r} is not one biotf computes (allowed: "
                         f"{' | '.join(POOLING_MODES)}); pass {parameter('pool')} to embed with biotf's own pooling")
    return modes[0]


def _max_length(model: Path) -> int | None:
    """sentence_bert_config.json's max_seq_length, else the tokenizer's model_max_length (None when unset)."""
    config = _optional(model / TRANSFORMER_CONFIG_FILE, "sentence-transformers config")
    if config.get("do_lower_case") is True:
        raise InputError(f"{model / TRANSFORMER_CONFIG_FILE}: do_lower_case=true (sentence-transformers lowercases "
                         f"the text before its tokenizer) is not supported; lowercase the input, or pass "
                         f"{parameter('pool')}")
    length = config.get("max_seq_length")
    if length is not None and (isinstance(length, bool) or not isinstance(length, int) or length < 1):
        raise InputError(f"{model / TRANSFORMER_CONFIG_FILE}: max_seq_length={length!r} is not a length inputs can "
                         "be cut to (allowed: an integer >= 1, or null for the tokenizer's model_max_length)")
    if length is None:
        length = _optional(model / TOKENIZER_CONFIG_FILE, "tokenizer config").get("model_max_length")
    if isinstance(length, bool) or not isinstance(length, (int, float)) or not 0 < length < UNSET_MAX_LENGTH:
        return None
    return int(length)


def _refuse_default_prompt(directory: Path) -> None:
    config = _optional(directory / MODEL_CONFIG_FILE, "sentence-transformers model config")
    prompt = config.get("default_prompt_name")
    if prompt:
        raise InputError(f"{directory / MODEL_CONFIG_FILE}: default_prompt_name={prompt!r} (a prompt put before "
                         f"every text) is not supported; pass {parameter('pool')} to embed the texts as they are")


def check_pooling_width(directory: Path, width: int) -> None:
    """Refuse a sentence-transformers directory whose Pooling module says it pools vectors of another width
    (`word_embedding_dimension`) than its Transformer's (`width`): its files do not belong together."""
    if not (directory / MODULES_FILE).is_file():
        return
    for module in _modules(directory):
        path = directory / module["path"] / POOLING_CONFIG_FILE
        if module["type"].endswith("Pooling") and path.is_file():
            stated = read_json_object(path, "sentence-transformers pooling config",
                                      types={"word_embedding_dimension": int}).get("word_embedding_dimension")
            if stated is not None and stated != width:
                raise InputError(f"{path}: word_embedding_dimension={stated} is not the width of the model's vectors "
                                 f"({width}); the Pooling module belongs to another model")


def _optional(path: Path, what: str) -> dict[str, Any]:
    return read_json_object(path, what) if path.is_file() else {}


def transformer_directory(directory: Path) -> Path:
    """The model a sentence-transformers directory holds (its first module, a Transformer), else `directory` itself."""
    if not (directory / MODULES_FILE).is_file():
        return directory
    first = _modules(directory)[0]
    return directory / first["path"] if first["type"].endswith("Transformer") else directory


def embed_defaults(model: str | Path | None, pool: str | None, max_length: int | None,
                   long: str | None) -> tuple[str | Path, dict[str, Any]]:
    """(the model source to load, `EmbedOptions` fields) for `biotf embed` given the user's `pool`, `max_length`
    and `long` (None: not given). A sentence-transformers directory's model is its Transformer module; without `pool`
    it supplies its pooling (`pool_specials`, `normalize`), its maximum length and `long="truncate"` (it cuts inputs
    there) where not given. An explicit `pool`, and any other source, get biotf's defaults (the model's length,
    chunk)."""
    directory = Path(model) if model is not None else None
    if directory is None or not (directory / MODULES_FILE).is_file():
        return model, {"pool": pool or "mean", "max_length": max_length, "long": long or "chunk"}
    if pool is not None:
        return transformer_directory(directory), {"pool": pool, "max_length": max_length, "long": long or "chunk"}
    sentence = read_sentence_pooling(directory)
    return sentence.model, {"pool": sentence.pool, "pool_specials": True, "normalize": sentence.normalize,
                            "max_length": max_length or sentence.max_length,
                            "long": long or ("truncate" if sentence.max_length else "chunk")}
