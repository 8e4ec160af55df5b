"""Reading and writing biotf checkpoints (Lightning .ckpt files) and exported directories, verified.

Writes are atomic (`files`); every checkpoint carries the CRC-32 of its content (`digest`) and every
export records the CRC-32 of its weights, checked on each read with a one-line error naming the file.
Files written before the checksum existed (format 1) are read without one.

Safety: weights are read with `torch.load(weights_only=True)` (`biotf.untrusted.load_tensors`) or safetensors, never
unpickled code; config.json is checked field by field before it is used (`biotf.untrusted.read_json_object`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from biotf.checkpoint.digest import DIGEST_KEY, content_crc32
from biotf.io.atomic import atomic_directory, atomic_write
from biotf.io.outputs import check_new_directory
from biotf.checkpoint.format import FORMAT_VERSION, WEIGHTS_FILE
from biotf.model.hf import CONFIG_FILE, check_hf_writable  # an export's config.json is named as a HF directory's
from biotf.errors import CheckpointError
from biotf.tokenizers.base import TOKENIZER_FILE, Tokenizer
from biotf.untrusted import check_finite, load_tensors, read_json_object, read_safetensors

if TYPE_CHECKING:
    from biotf.model import Transformer

EXPORT_DIGEST_KEY = "weights_crc32"
# What biotf reads from an exported config.json, checked before it is read (a crafted file is one line).
EXPORT_CONFIG_TYPES = {"biotf_format": int, "model": dict, "tokenizer_fingerprint": str,
                       "train_config": (dict, type(None)), EXPORT_DIGEST_KEY: int}


def _check_digest(expected: Any, content: Any, path: Path) -> None:
    if expected is None:
        return  # format 1: written before checkpoints carried a checksum
    actual = content_crc32(content)
    if actual != expected:
        raise CheckpointError(f"{path} is damaged: its content has CRC-32 {actual:08x}, it was written with "
                              f"{int(expected):08x} (use an earlier checkpoint, or retrain)")


def _by_name(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensors in name order: safetensors does not keep the order they were saved in."""
    return dict(sorted(state.items()))


def save_checkpoint(checkpoint: dict[str, Any], path: str | Path) -> Path:
    """torch.save `checkpoint` with its content CRC-32 added, atomically (a failed write never touches `path`).

    Through a Python file: torch's own writer reports a full disk as "unexpected pos" alone (a RuntimeError), a
    Python file raises the OSError (which torch's cleanup then covers with "unexpected pos"), which `atomic_write`
    turns into one line naming `path` (`biotf.errors.disk_error`)."""
    stamped = {**checkpoint, DIGEST_KEY: content_crc32(checkpoint)}

    def write(temporary: Path) -> None:
        with open(temporary, "wb") as handle:
            torch.save(stamped, handle)

    return atomic_write(path, write)


def read_checkpoint(path: str | Path, map_location: Any = "cpu") -> dict[str, Any]:
    """A checkpoint file's content, loaded without unpickling code and checked against its CRC-32."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"checkpoint {path} is a directory: a sharded checkpoint of an FSDP run is resumed by "
                              "training (ckpt_path=...) and turned into a file when the run ends")
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    checkpoint = load_tensors(path, "checkpoint", map_location=map_location)
    if isinstance(checkpoint, dict):
        _check_digest(checkpoint.pop(DIGEST_KEY, None), checkpoint, path)
    return checkpoint


def check_export_directory(directory: str | Path) -> Path:
    """`directory` if an export may go there (it does not exist, or is an empty directory): an export never
    replaces anything, so it cannot destroy the model it came from. Commands call it before their work starts."""
    return check_new_directory(directory, "export directory")


def save_pretrained(model: Transformer, tokenizer: Tokenizer, directory: str | Path,
                    train_config: dict[str, Any] | None = None,
                    also_write: Callable[[Path], None] | None = None) -> Path:
    """Write config.json, model.safetensors and tokenizer.json into a new `directory`, all or nothing.

    `also_write(staging)` adds files of its own (a fine-tuned model's head) before the directory appears, so that
    they too are all or nothing and get the user's umask."""
    from safetensors.torch import save_file

    directory = check_export_directory(directory)
    state = {name: tensor.detach().contiguous() for name, tensor in model.state_dict().items()}
    config = {"biotf_format": FORMAT_VERSION, "model": model.config.to_dict(),
              "tokenizer_fingerprint": tokenizer.fingerprint, "train_config": train_config,
              EXPORT_DIGEST_KEY: content_crc32(_by_name(state))}
    with atomic_directory(directory) as staging:
        (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        save_file(state, str(staging / WEIGHTS_FILE))
        tokenizer.save(staging)
        if also_write is not None:
            also_write(staging)
    return directory


def save_hf_pretrained(model: Transformer, tokenizer: Tokenizer, directory: str | Path,
                       model_type: str | None = None) -> Path:
    """Write `model` as a Hugging Face checkpoint of family `model_type` (`Transformer.to_hf`; None: the first family
    that holds it) with its tokenizer's `transformers` files into a new `directory`, all or nothing: what
    `AutoModel*` / `AutoTokenizer.from_pretrained` load. A model or tokenizer that family cannot hold is refused
    before the directory appears."""
    directory = check_export_directory(directory)
    check_hf_writable(model.config)  # the model's refusal first: no tokenizer makes a stem model writable
    hf_tokenizer = tokenizer.to_hf()  # refuses a scheme without a transformers equivalent before anything is written
    with atomic_directory(directory) as staging:
        model.to_hf(staging, model_type)
        hf_tokenizer.save_pretrained(str(staging))
    return directory


def read_exported(directory: str | Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """An exported directory's config.json and weights (checked against the recorded CRC-32)."""
    directory = Path(directory)
    for name in (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE):
        if not (directory / name).is_file():
            raise CheckpointError(f"exported model directory {directory} has no {name}")
    config = read_json_object(directory / CONFIG_FILE, "model config", CheckpointError, types=EXPORT_CONFIG_TYPES,
                              required=["model"])
    state = read_safetensors(directory / WEIGHTS_FILE)
    _check_digest(config.get(EXPORT_DIGEST_KEY), _by_name(state), directory / WEIGHTS_FILE)
    check_finite(state.items(), directory / WEIGHTS_FILE)
    return config, state
