"""`load_pretrained`: a model and its tokenizer from a run directory, a checkpoint or an exported directory.

    model, tokenizer = biotf.load_pretrained("outputs/protein_mlm/2026-11-29_18-00-00")

Sources, tried in order (`LOADERS`):
- a training run directory (holds `checkpoints/`): its `best.ckpt` (lowest validation loss), else
  `last.ckpt`;
- a Lightning checkpoint file `*.ckpt` written by biotf training;
- an exported directory (`biotf export-model`): `config.json`, `model.safetensors`, `tokenizer.json`;
- a Hugging Face checkpoint directory (Qwen2, or ESM with its vocab.txt; `hf_checkpoint.load_hf_model`).

The format, in one place: a checkpoint holds `checkpoint["biotf"]` = {"format": 1, "model": the
TransformerConfig fields, "tokenizer": {"kind", "fingerprint", "config": its `to_config()`, vocabulary
included}, "tokenizer_fingerprint": ...,
"train_config": the resolved training config or None}; model weights are the Lightning
`state_dict` under the `model.` prefix. An exported `config.json` holds the same keys except the
tokenizer, which is `tokenizer.json` beside it. A tokenizer whose fingerprint differs from the one
the weights were trained with is refused, naming both fingerprints: the embedding rows would mean
other tokens and every vector would be silently wrong.

Safety: weights are read with `torch.load(weights_only=True)` or safetensors, never unpickled
code. Writes go to a temporary name first and are renamed into place, so a killed process never
leaves a half-written file under the final name.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import torch

from biotf.errors import CheckpointError
from biotf.model import Transformer, TransformerConfig
from biotf.tokenizers import load_tokenizer
from biotf.tokenizers.base import TOKENIZER_FILE, Tokenizer, tokenizer_class

CHECKPOINT_KEY = "biotf"
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
CHECKPOINT_DIR = "checkpoints"
STATE_PREFIX = "model."


class Pretrained(NamedTuple):
    """What `load_pretrained` returns; unpacks as `model, tokenizer = ...`."""

    model: Transformer
    tokenizer: Tokenizer


# --- the checkpoint payload ---------------------------------------------------------------------
def tokenizer_payload(tokenizer: Tokenizer) -> dict[str, Any]:
    """The tokenizer as plain values: kind, fingerprint and the `to_config()` that rebuilds it."""
    return {"kind": tokenizer.kind, "fingerprint": tokenizer.fingerprint, "config": tokenizer.to_config()}


def tokenizer_from_payload(payload: dict[str, Any], source: str) -> Tokenizer:
    """Rebuild a tokenizer from `tokenizer_payload` and check that it still has the recorded fingerprint."""
    try:
        tokenizer = tokenizer_class(payload["kind"]).from_config(payload["config"])
    except (KeyError, TypeError) as error:
        raise CheckpointError(f"{source}: the stored tokenizer cannot be rebuilt ({error})") from None
    if tokenizer.fingerprint != payload.get("fingerprint"):
        raise CheckpointError(f"{source}: the stored tokenizer rebuilds with fingerprint {tokenizer.fingerprint}, "
                              f"not the recorded {payload.get('fingerprint')}")
    return tokenizer


def checkpoint_payload(model_config: TransformerConfig, tokenizer: Tokenizer,
                       train_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """`checkpoint["biotf"]`: everything needed to rebuild the model and its tokenizer, as plain values."""
    return {"format": FORMAT_VERSION, "model": model_config.to_dict(), "tokenizer": tokenizer_payload(tokenizer),
            "tokenizer_fingerprint": tokenizer.fingerprint, "train_config": train_config}


def check_tokenizer(payload: dict[str, Any] | None, tokenizer: Tokenizer, source: str) -> None:
    """Refuse `tokenizer` when it is not the one the weights in `payload` were trained with."""
    if payload is None:
        raise CheckpointError(f"{source} has no '{CHECKPOINT_KEY}' section: not written by biotf training")
    expected = payload["tokenizer_fingerprint"]
    if tokenizer.fingerprint != expected:
        raise CheckpointError(f"tokenizer mismatch: {source} was trained with tokenizer fingerprint {expected}, "
                              f"the given {tokenizer.kind} tokenizer has fingerprint {tokenizer.fingerprint}")


# --- atomic writes ------------------------------------------------------------------------------
def atomic_write(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call `write(temporary_path)` then rename it to `path`; a crash leaves only a hidden temporary."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(handle)
    try:
        write(Path(temporary))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


# --- loaders ------------------------------------------------------------------------------------
def _model(config: dict[str, Any], state: dict[str, torch.Tensor], source: str) -> Transformer:
    model = Transformer(TransformerConfig.from_dict(config))
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as error:
        first = str(error).splitlines()[0]
        raise CheckpointError(f"{source}: weights do not fit the stored model config ({first})") from None
    return model.eval()


def _read_checkpoint(path: Path) -> dict[str, Any]:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # unpickling errors come in many types; all mean "not a safe biotf checkpoint"
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(f"cannot read checkpoint {path}: {reason}") from None


def read_checkpoint_payload(path: str | Path) -> dict[str, Any] | None:
    """The `checkpoint["biotf"]` section of a checkpoint file (None when it has none)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    checkpoint = _read_checkpoint(path)
    return checkpoint.get(CHECKPOINT_KEY) if isinstance(checkpoint, dict) else None


def load_checkpoint(path: str | Path) -> Pretrained:
    """Model and tokenizer from a biotf Lightning checkpoint file."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist")
    checkpoint = _read_checkpoint(path)
    payload = checkpoint.get(CHECKPOINT_KEY) if isinstance(checkpoint, dict) else None
    if payload is None or "state_dict" not in checkpoint:
        raise CheckpointError(f"{path} is not a biotf training checkpoint (no '{CHECKPOINT_KEY}' section)")
    tokenizer = tokenizer_from_payload(payload["tokenizer"], str(path))
    check_tokenizer(payload, tokenizer, str(path))
    state = {k[len(STATE_PREFIX):]: v for k, v in checkpoint["state_dict"].items() if k.startswith(STATE_PREFIX)}
    return Pretrained(_model(payload["model"], state, str(path)), tokenizer)


def run_checkpoint(run_dir: str | Path) -> Path:
    """The checkpoint a run directory stands for: best by validation loss, else the last one."""
    directory = Path(run_dir) / CHECKPOINT_DIR
    for name in ("best.ckpt", "last.ckpt"):
        if (directory / name).is_file():
            return directory / name
    raise CheckpointError(f"run directory {run_dir} has no checkpoints/best.ckpt or checkpoints/last.ckpt")


def load_run(run_dir: str | Path) -> Pretrained:
    """Model and tokenizer of a training run directory (its tokenizer.json must match the checkpoint's)."""
    loaded = load_checkpoint(run_checkpoint(run_dir))
    side_file = Path(run_dir) / TOKENIZER_FILE
    if side_file.is_file():
        side = load_tokenizer(side_file)
        if side.fingerprint != loaded.tokenizer.fingerprint:
            raise CheckpointError(f"tokenizer mismatch in run {run_dir}: {side_file} has fingerprint {side.fingerprint}, "
                                  f"its checkpoint was trained with {loaded.tokenizer.fingerprint}")
    return loaded


def load_exported(directory: str | Path) -> Pretrained:
    """Model and tokenizer from a directory written by `save_pretrained` / `biotf export-model`."""
    from safetensors.torch import load_file

    directory = Path(directory)
    for name in (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE):
        if not (directory / name).is_file():
            raise CheckpointError(f"exported model directory {directory} has no {name}")
    config = json.loads((directory / CONFIG_FILE).read_text(encoding="utf-8"))
    tokenizer = load_tokenizer(directory / TOKENIZER_FILE)
    check_tokenizer(config, tokenizer, str(directory / CONFIG_FILE))
    try:
        state = load_file(directory / WEIGHTS_FILE)
    except Exception as error:  # safetensors raises its own error types for damaged files
        raise CheckpointError(f"cannot read weights {directory / WEIGHTS_FILE}: {error}") from None
    return Pretrained(_model(config["model"], state, str(directory)), tokenizer)


def _is_run_dir(path: Path) -> bool:
    return path.is_dir() and (path / CHECKPOINT_DIR).is_dir()


def _is_checkpoint(path: Path) -> bool:
    return path.is_file() and path.suffix == ".ckpt"


def _is_exported(path: Path) -> bool:
    if not (path / CONFIG_FILE).is_file():
        return False
    try:
        return "biotf_format" in json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # unreadable, not UTF-8 or not JSON: not ours (UnicodeDecodeError is a ValueError)
        return False


def load_hf_directory(directory: str | Path) -> Pretrained:
    """Model (float32) and tokenizer of a Hugging Face Qwen2 or ESM checkpoint directory (`hf_checkpoint`)."""
    from biotf.inference.hf_checkpoint import load_hf_model

    return Pretrained(*load_hf_model(directory))


def _is_hf_directory(path: Path) -> bool:
    from biotf.inference.hf_checkpoint import is_hf_directory

    return is_hf_directory(path)


# (name, detect, load): the first whose `detect(path)` is true loads it. Extend by appending.
LOADERS: list[tuple[str, Callable[[Path], bool], Callable[[Path], Pretrained]]] = [
    ("run directory", _is_run_dir, load_run),
    ("checkpoint", _is_checkpoint, load_checkpoint),
    ("exported directory", _is_exported, load_exported),
    ("Hugging Face directory (Qwen2, ESM)", _is_hf_directory, load_hf_directory),
]


def load_pretrained(source: str | Path, tokenizer: Tokenizer | None = None,
                    device: str | torch.device = "cpu") -> Pretrained:
    """The model (eval mode, on `device`) and its tokenizer from a run dir, a .ckpt or an exported dir.

    Passing `tokenizer` checks it against the one the weights were trained with (and returns it).
    """
    path = Path(source)
    if not path.exists():
        raise CheckpointError(f"model source {path} does not exist")
    for _, detect, load in LOADERS:
        if detect(path):
            model, stored = load(path)
            break
    else:
        kinds = ", ".join(name for name, _, _ in LOADERS)
        raise CheckpointError(f"cannot load a model from {path} (allowed: {kinds})")
    if tokenizer is not None and tokenizer.fingerprint != stored.fingerprint:
        raise CheckpointError(f"tokenizer mismatch: {path} was trained with tokenizer fingerprint {stored.fingerprint}, "
                              f"the given {tokenizer.kind} tokenizer has fingerprint {tokenizer.fingerprint}")
    return Pretrained(model.to(device), tokenizer or stored)


def save_pretrained(model: Transformer, tokenizer: Tokenizer, directory: str | Path,
                    train_config: dict[str, Any] | None = None) -> Path:
    """Write config.json, model.safetensors and tokenizer.json into a new `directory`, all or nothing.

    The files are written into a hidden sibling directory that is renamed into place at the end.
    """
    from safetensors.torch import save_file

    directory = Path(directory)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise CheckpointError(f"export directory {directory} already exists and is not empty; choose a new one")
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", suffix=".tmp", dir=directory.parent))
    try:
        config = {"biotf_format": FORMAT_VERSION, "model": model.config.to_dict(),
                  "tokenizer_fingerprint": tokenizer.fingerprint, "train_config": train_config}
        (staging / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(staging / WEIGHTS_FILE))
        tokenizer.save(staging)
        if directory.exists():
            directory.rmdir()
        os.rename(staging, directory)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return directory
