"""A Hugging Face checkpoint directory as (model, tokenizer), and a text one (Qwen2) with generation defaults.

    model, tokenizer = load_hf_model("esm2_t6_8M_UR50D")           # Qwen2 or ESM
    checkpoint = load_hf_checkpoint("Qwen2.5-0.5B-Instruct", dtype=torch.bfloat16)
    model, tokenizer, defaults = checkpoint                           # causal LMs only

The directory is what `transformers`' `save_pretrained` writes (or a hub download holds):
- `config.json` with a `model_type` of `ARCHITECTURES` (others are refused, naming theirs and the supported ones);
- `model.safetensors`, or shards `model-0000x-of-0000y.safetensors` with `model.safetensors.index.json`, or
  `pytorch_model.bin`, read by `Transformer.from_hf` into a model built on the meta device (`biotf.model.hf`);
- the tokenizer, by model_type (`TOKENIZER_READERS`): Qwen2's `tokenizer.json` + `tokenizer_config.json`
  (special tokens, chat template; or `chat_template.jinja`), ESM's `vocab.txt` (mapped onto biotf's protein
  tokenizer, refused unless the ids agree);
- `generation_config.json` (optional, text models): eos ids and sampling defaults, read as `transformers` does.
Nothing is downloaded and no code from the directory is run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any, NamedTuple

import torch

from biotf.errors import CheckpointError, ConfigError
from biotf.model import Transformer
from biotf.model.hf import CONFIG_FILE, ESM_ARCHITECTURES, LOADERS, Materialise, read_hf_config
from biotf.tokenizers import load_tokenizer
from biotf.tokenizers.amino_acid import AminoAcidTokenizer
from biotf.tokenizers.base import TOKENIZER_FILE, Tokenizer
from biotf.untrusted import read_json_object

GENERATION_CONFIG_FILE = "generation_config.json"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
ESM_VOCAB_FILE = "vocab.txt"
NUMBER, OPTIONAL = (int, float), type(None)
# generation_config.json's fields that `GenerationDefaults.from_hf` reads, checked before it reads them.
GENERATION_CONFIG_TYPES = {"eos_token_id": (int, list, OPTIONAL), "pad_token_id": (int, OPTIONAL),
                           "do_sample": (bool, OPTIONAL), "max_new_tokens": (int, OPTIONAL),
                           "temperature": (*NUMBER, OPTIONAL), "top_k": (int, OPTIONAL), "top_p": (*NUMBER, OPTIONAL),
                           "repetition_penalty": (*NUMBER, OPTIONAL)}
# What biotf loads, by model_type: the architectures (config.json "architectures") it reads, ESM encoders without a
# masked-LM head included (for embeddings); and of those, the ones that generate text.
ARCHITECTURES = {"qwen2": ("Qwen2ForCausalLM",), "esm": ESM_ARCHITECTURES}
CAUSAL_LM_ARCHITECTURES = {"qwen2": ("Qwen2ForCausalLM",)}


def read_text_tokenizer(directory: Path) -> Tokenizer:
    if not (directory / TOKENIZER_FILE).is_file():
        raise CheckpointError(f"{directory} has no {TOKENIZER_FILE}: copy the checkpoint's tokenizer files "
                              f"({TOKENIZER_FILE}, tokenizer_config.json) into it")
    return load_tokenizer(directory)


def read_esm_tokenizer(directory: Path) -> Tokenizer:
    return AminoAcidTokenizer.from_esm_vocab(directory / ESM_VOCAB_FILE)


TOKENIZER_READERS = {"qwen2": read_text_tokenizer, "esm": read_esm_tokenizer}


@dataclass(frozen=True)
class GenerationDefaults:
    """Generation settings of a checkpoint; `transformers`' defaults where generation_config.json is silent.

    `temperature` 0 means greedy decoding (generation_config.json's `do_sample: false`).
    """

    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int | None = None
    max_new_tokens: int = 256
    temperature: float = 0.0
    top_k: int | None = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.0

    @classmethod
    def from_hf(cls, generation: Mapping[str, Any], tokenizer: Tokenizer | None = None) -> GenerationDefaults:
        """From generation_config.json's fields; the tokenizer's eos id is an eos id too."""
        eos = generation.get("eos_token_id")
        eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
        if tokenizer is not None and tokenizer.eos_id is not None:
            eos_ids.append(tokenizer.eos_id)
        pad = generation.get("pad_token_id")
        if pad is None and tokenizer is not None:
            pad = tokenizer.pad_id
        sample = bool(generation.get("do_sample", False))
        max_new_tokens = generation.get("max_new_tokens") or cls.max_new_tokens
        return cls(eos_token_ids=tuple(dict.fromkeys(int(i) for i in eos_ids)),
                   pad_token_id=None if pad is None else int(pad), max_new_tokens=int(max_new_tokens),
                   temperature=float(generation.get("temperature") or 1.0) if sample else 0.0,
                   top_k=generation.get("top_k", cls.top_k), top_p=float(generation.get("top_p") or 1.0),
                   repetition_penalty=float(generation.get("repetition_penalty") or 1.0))


class HFCheckpoint(NamedTuple):
    """What `load_hf_checkpoint` returns; unpacks as `model, tokenizer, defaults = ...`."""

    model: Transformer
    tokenizer: Tokenizer
    defaults: GenerationDefaults


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype) and name in DTYPES.values():
        return name
    if name not in DTYPES:
        raise ConfigError("dtype", name, allowed=", ".join(DTYPES))
    return DTYPES[name]


def is_hf_directory(path: str | PathLike) -> bool:
    """A directory whose config.json names a `model_type` (how every `transformers` checkpoint says what it is); a
    config.json that is no JSON object is refused, naming it."""
    path = Path(path)
    return path.is_dir() and (path / CONFIG_FILE).is_file() and "model_type" in read_hf_config(path)


def check_architecture(directory: Path, config: Mapping[str, Any],
                       supported: Mapping[str, tuple[str, ...]] = ARCHITECTURES, purpose: str = "load") -> None:
    """Refuse, before reading any weights, what biotf cannot run for `purpose`, naming what it can."""
    names = ", ".join(f"{kind} ({' | '.join(archs)})" for kind, archs in supported.items())
    model_type = config.get("model_type")
    if model_type not in LOADERS or model_type not in supported:
        raise CheckpointError(f"{directory / CONFIG_FILE} has model_type {model_type!r}, which biotf cannot "
                              f"{purpose} (supported: {names})")
    architectures = config.get("architectures") or []
    if architectures and not {str(name) for name in architectures} & set(supported[model_type]):
        raise CheckpointError(f"{directory / CONFIG_FILE} has architectures {architectures}, not "
                              f"{' | '.join(supported[model_type])}: biotf cannot {purpose} it (supported: {names})")


def read_generation_config(directory: Path, config: Mapping[str, Any]) -> dict[str, Any]:
    """generation_config.json, else the eos/pad ids of config.json (as `transformers` falls back)."""
    path = directory / GENERATION_CONFIG_FILE
    if not path.is_file():
        return {key: config[key] for key in ("eos_token_id", "pad_token_id") if config.get(key) is not None}
    return read_json_object(path, "generation config", CheckpointError, types=GENERATION_CONFIG_TYPES)


def _read_checked_config(directory: Path, supported: Mapping[str, str], purpose: str) -> dict[str, Any]:
    if not directory.is_dir():
        raise CheckpointError(f"model directory {directory} does not exist")
    config = read_hf_config(directory)
    check_architecture(directory, config, supported, purpose)
    return config


def load_hf_model(directory: str | PathLike, dtype: str | torch.dtype = torch.float32,
                  materialise: Materialise | None = None) -> tuple[Transformer, Tokenizer]:
    """Model (eval mode, CPU, `dtype`) and tokenizer of a Qwen2 or ESM checkpoint
    directory, by its model_type. An ESM encoder without masked-LM head (EsmModel, a classifier) loads with
    `lm_head=False`: its hidden states and embeddings work, its logits are refused."""
    directory = Path(directory)
    dtype = parse_dtype(dtype)
    config = _read_checked_config(directory, ARCHITECTURES, "load")
    tokenizer = TOKENIZER_READERS[config["model_type"]](directory)
    model = Transformer.from_hf(directory, dtype=dtype, materialise=materialise)
    if tokenizer.vocab_size > model.config.vocab_size:
        raise CheckpointError(f"{directory}: the tokenizer has {tokenizer.vocab_size} tokens but the model's "
                              f"embedding only {model.config.vocab_size} rows: tokenizer and weights do not match")
    return model, tokenizer


def load_hf_checkpoint(directory: str | PathLike, dtype: str | torch.dtype = torch.float32) -> HFCheckpoint:
    """Model (eval mode, CPU, `dtype`), tokenizer and generation defaults of a Qwen2 checkpoint directory, for
    generation: its matrices are read straight into their decoding layout (`biotf.inference.fast`; one copy per
    tensor, where converting first and arranging later would hold two of the largest), so that
    `optimize_for_decoding` then copies nothing."""
    from biotf.inference.fast.layout import loaded_in_decode_layout

    directory = Path(directory)
    config = _read_checked_config(directory, CAUSAL_LM_ARCHITECTURES, "run for text generation")
    model, tokenizer = load_hf_model(directory, dtype, materialise=loaded_in_decode_layout)
    defaults = GenerationDefaults.from_hf(read_generation_config(directory, config), tokenizer)
    return HFCheckpoint(model, tokenizer, defaults)
