"""A Hugging Face checkpoint directory as (model, tokenizer): `load_hf_model("esm2_t6_8M_UR50D")` (Qwen2 or ESM).

The directory is what `transformers`' `save_pretrained` writes (or a hub download holds):
- `config.json` with a `model_type` of `ARCHITECTURES` (others are refused, naming theirs and the supported ones);
- the weights (`model.safetensors`, its shards with their index, or `pytorch_model.bin`), read by
  `Transformer.from_hf` into a model built on the meta device (`biotf.model.hf`);
- the tokenizer, by model_type (`TOKENIZER_READERS`): Qwen2's `tokenizer.json` + `tokenizer_config.json`, ESM's
  `vocab.txt` (biotf's protein tokenizer where it is ESM-2's layout, else as `transformers`' EsmTokenizer reads
  it); GPT-2, BERT, RoBERTa, BLOOM, Llama, Mistral, T5 and ALBERT through `read_hf_tokenizer` (the ids of
  `transformers`' AutoTokenizer on the directory), ESM C too (or, without tokenizer.json, the vocabulary
  transformers' EsmcTokenizer builds, as AutoTokenizer does).
Nothing is downloaded and no code from the directory is run. What a directory stores for generation
(generation_config.json) is read by `read_generation_settings`, when generation is asked for; what the settings
mean: `biotf.inference.pretrained`.
"""

from __future__ import annotations

from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Any, NamedTuple

import torch

from biotf.errors import CheckpointError, ConfigError
from biotf.model import Transformer
from biotf.model.hf import CONFIG_FILE, FAMILIES, Materialise, hf_model_config, read_hf_config
from biotf.tokenizers import load_tokenizer
from biotf.tokenizers.amino_acid import AminoAcidTokenizer
from biotf.tokenizers.base import TOKENIZER_FILE, Tokenizer
from biotf.tokenizers.hf_tokenizer_directory import from_transformers, read_hf_tokenizer
from biotf.untrusted import read_json_object

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
ESM_VOCAB_FILE = "vocab.txt"
# What biotf loads, by model_type: the architectures (config.json "architectures") it reads, encoders without a
# masked-LM head included (for embeddings); the causal ones generate text (`biotf.inference.pretrained`).
ARCHITECTURES = {name: family.architectures for name, family in FAMILIES.items()}
CAUSAL_LM_ARCHITECTURES = {name: family.causal for name, family in FAMILIES.items() if family.causal}
GENERATION_CONFIG_FILE = "generation_config.json"
NUMBER, OPTIONAL = (int, float), type(None)
# generation_config.json's fields that `GenerationDefaults.from_hf` reads, checked before it reads them.
GENERATION_CONFIG_TYPES = {"eos_token_id": (int, list, OPTIONAL), "pad_token_id": (int, OPTIONAL),
                           "bos_token_id": (int, OPTIONAL),
                           "do_sample": (bool, OPTIONAL), "max_new_tokens": (int, OPTIONAL),
                           "temperature": (*NUMBER, OPTIONAL), "top_k": (int, OPTIONAL), "top_p": (*NUMBER, OPTIONAL),
                           "repetition_penalty": (*NUMBER, OPTIONAL)}


def read_text_tokenizer(directory: Path) -> Tokenizer:
    if not (directory / TOKENIZER_FILE).is_file():
        raise CheckpointError(f"{directory} has no {TOKENIZER_FILE}: copy the checkpoint's tokenizer files "
                              f"({TOKENIZER_FILE}, tokenizer_config.json) into it")
    return load_tokenizer(directory)


def read_esm_tokenizer(directory: Path) -> Tokenizer:
    """biotf's protein tokenizer where vocab.txt is ESM-2's layout (its character policies apply); any other ESM
    vocabulary (Nucleotide Transformer's k-mers, SaProt's residue + 3Di tokens) as `transformers`' EsmTokenizer reads
    it (`read_hf_tokenizer`)."""
    if AminoAcidTokenizer.is_esm_vocab(directory / ESM_VOCAB_FILE):
        return AminoAcidTokenizer.from_esm_vocab(directory / ESM_VOCAB_FILE)
    return read_hf_tokenizer(directory)


def read_esmc_tokenizer(directory: Path) -> Tokenizer:
    """ESM C's tokenizer.json, as AutoTokenizer reads it; without one, the tokenizer `transformers`' EsmcTokenizer
    builds from no file at all (the one vocabulary every ESM C shares), as AutoTokenizer does too."""
    if (directory / TOKENIZER_FILE).is_file():
        return read_hf_tokenizer(directory)
    from transformers import EsmcTokenizer

    return from_transformers(EsmcTokenizer.from_pretrained(str(directory), local_files_only=True))


# The families of #26 read their tokenizer as `transformers`' AutoTokenizer does (tokenizer.json, vocab.txt or
# vocab.json + merges.txt); Qwen2's tokenizer.json is read as is (its ids equal AutoTokenizer's).
TOKENIZER_READERS = {"qwen2": read_text_tokenizer, "esm": read_esm_tokenizer, "esmc": read_esmc_tokenizer,
                     **dict.fromkeys(("gpt2", "bert", "roberta", "bloom", "llama", "mistral", "t5", "albert"),
                                     read_hf_tokenizer)}


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
    if model_type not in FAMILIES or model_type not in supported:
        raise CheckpointError(f"{directory / CONFIG_FILE} has model_type {model_type!r}, which biotf cannot "
                              f"{purpose} (supported: {names})")
    architectures = config.get("architectures") or []
    if architectures and not {str(name) for name in architectures} & set(supported[model_type]):
        raise CheckpointError(f"{directory / CONFIG_FILE} has architectures {architectures}, not "
                              f"{' | '.join(supported[model_type])}: biotf cannot {purpose} it (supported: {names})")


def read_checked_config(directory: Path, supported: Mapping[str, tuple[str, ...]], purpose: str) -> dict[str, Any]:
    if not directory.is_dir():
        raise CheckpointError(f"model directory {directory} does not exist")
    config = read_hf_config(directory)
    check_architecture(directory, config, supported, purpose)
    hf_model_config(directory, config)  # a bad field is the config's error, not the tokenizer's read after it
    return config


def load_hf_model(directory: str | PathLike, dtype: str | torch.dtype = torch.float32,
                  materialise: Materialise | None = None) -> tuple[Transformer, Tokenizer]:
    """Model (eval mode, CPU, `dtype`) and tokenizer of a Qwen2 or ESM checkpoint
    directory, by its model_type. An ESM encoder without masked-LM head (EsmModel, a classifier) loads with
    `lm_head=False`: its hidden states and embeddings work, its logits are refused."""
    directory = Path(directory)
    dtype = parse_dtype(dtype)
    config = read_checked_config(directory, ARCHITECTURES, "load")  # before the tokenizer, which reads config.json too
    tokenizer = TOKENIZER_READERS[config["model_type"]](directory)
    model = Transformer.from_hf(directory, dtype=dtype, materialise=materialise)
    if tokenizer.vocab_size > model.config.vocab_size:
        raise CheckpointError(f"{directory}: the tokenizer has {tokenizer.vocab_size} tokens but the model's "
                              f"embedding only {model.config.vocab_size} rows: tokenizer and weights do not match")
    return model, tokenizer


class GenerationSettings(NamedTuple):
    """What a directory stores for generation, and the file it came from (the one an error about it names)."""

    values: dict[str, Any]
    file: Path


def read_generation_settings(directory: Path) -> GenerationSettings:
    """generation_config.json, else the bos/eos/pad ids of config.json (as `transformers` falls back); a directory
    of a family or architecture biotf does not generate with is refused first, naming those it does."""
    config = read_checked_config(directory, CAUSAL_LM_ARCHITECTURES, "run for text generation")
    path = directory / GENERATION_CONFIG_FILE
    if not path.is_file():
        return GenerationSettings({key: config[key] for key in ("bos_token_id", "eos_token_id", "pad_token_id")
                                   if config.get(key) is not None}, directory / CONFIG_FILE)
    return GenerationSettings(read_json_object(path, "generation config", CheckpointError,
                                               types=GENERATION_CONFIG_TYPES), path)
