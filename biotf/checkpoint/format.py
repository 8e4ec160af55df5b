"""The biotf checkpoint format: what a checkpoint says about the model and the tokenizer it was trained with.

A Lightning checkpoint written by biotf training holds `checkpoint["biotf"]` =
{"format": 2, "model": the TransformerConfig fields, "tokenizer": {"kind", "fingerprint", "config": its
`to_config()`, vocabulary included}, "train_config": the resolved training config or None}; the weights
are the Lightning `state_dict` under the `model.` prefix. An exported directory's `config.json` holds
{"biotf_format": 2, "model", "tokenizer_fingerprint", "train_config", "weights_crc32"}, its tokenizer
being `tokenizer.json` beside it. Each file records the tokenizer fingerprint once; format-1 checkpoints
also had a top-level "tokenizer_fingerprint" (always equal to the tokenizer's) and are still read.

A tokenizer whose fingerprint differs from the one the weights were trained with is refused by
`ensure_same_tokenizer`, naming both fingerprints: the embedding rows would mean other tokens and every
vector would be silently wrong.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from biotf.errors import CheckpointError
from biotf.tokenizers.base import Tokenizer, tokenizer_class

if TYPE_CHECKING:
    from biotf.model import TransformerConfig

CHECKPOINT_KEY = "biotf"
FORMAT_VERSION = 2
WEIGHTS_FILE = "model.safetensors"
CHECKPOINT_DIR = "checkpoints"
FINETUNED_MODEL_DIR = "model"  # a fine-tuning run's export, inside its run directory
TASK_FILE = "task.json"  # what marks an export as fine-tuned: its task, classes, pooling
STATE_PREFIX = "model."


def tokenizer_payload(tokenizer: Tokenizer) -> dict[str, Any]:
    """The tokenizer as plain values: kind, fingerprint and the `to_config()` that rebuilds it."""
    return {"kind": tokenizer.kind, "fingerprint": tokenizer.fingerprint, "config": tokenizer.to_config()}


def checkpoint_payload(model_config: TransformerConfig, tokenizer: Tokenizer,
                       train_config: dict[str, Any] | None = None) -> dict[str, Any]:
    """`checkpoint["biotf"]`: everything needed to rebuild the model and its tokenizer, as plain values."""
    return {"format": FORMAT_VERSION, "model": model_config.to_dict(), "tokenizer": tokenizer_payload(tokenizer),
            "train_config": train_config}


def payload_fingerprint(payload: dict[str, Any] | None, source: str) -> str:
    """The tokenizer fingerprint a checkpoint payload or an exported config.json records."""
    if not isinstance(payload, dict):
        raise CheckpointError(f"{source} has no '{CHECKPOINT_KEY}' section: not written by biotf training")
    tokenizer = payload.get("tokenizer")
    fingerprint = tokenizer.get("fingerprint") if isinstance(tokenizer, dict) else payload.get("tokenizer_fingerprint")
    if not isinstance(fingerprint, str):
        raise CheckpointError(f"{source} records no tokenizer fingerprint")
    return fingerprint


def ensure_same_tokenizer(expected: str, tokenizer: Tokenizer, source: str,
                          candidate: str = "the given tokenizer") -> None:
    """Refuse `tokenizer` (described as `candidate`) unless it has the fingerprint `source` was trained with."""
    if tokenizer.fingerprint != expected:
        raise CheckpointError(f"tokenizer mismatch: {source} was trained with tokenizer fingerprint {expected}, "
                              f"{candidate} ({tokenizer.kind}) has fingerprint {tokenizer.fingerprint}")


def tokenizer_from_payload(payload: dict[str, Any], source: str) -> Tokenizer:
    """Rebuild the tokenizer a checkpoint payload stores, checked against its recorded fingerprint."""
    try:
        stored = payload["tokenizer"]
        tokenizer = tokenizer_class(stored["kind"]).from_config(stored["config"])
    except (KeyError, TypeError) as error:
        raise CheckpointError(f"{source}: the stored tokenizer cannot be rebuilt ({error})") from None
    ensure_same_tokenizer(payload_fingerprint(payload, source), tokenizer, source,
                          candidate="its stored tokenizer, rebuilt,")
    return tokenizer
