"""A biotf model from its stored files: a Lightning checkpoint's or an export's config, checked against its weights.

The file formats, their checksums and the tokenizer check live in `biotf.checkpoint`; this module turns them into
a model and its tokenizer (`biotf.checkpoint.loading` turns every kind of source into a loaded model through these).
The stored config is checked against the weights' shapes before the model is allocated (`_check_shapes`), so a
damaged or edited config (vocab_size 1e8, n_layers 1e6) fails in milliseconds naming the mismatch rather than
after allocating gigabytes.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from biotf.checkpoint import (CHECKPOINT_KEY, CONFIG_FILE, FINETUNED_MODEL_DIR, STATE_PREFIX, ensure_same_tokenizer,
                              payload_fingerprint, read_checkpoint, read_exported, tokenizer_from_payload)
from biotf.errors import CheckpointError, ConfigError
from biotf.model import Transformer, TransformerConfig
from biotf.model.heads import ContactHead
from biotf.tokenizers import load_tokenizer
from biotf.tokenizers.base import TOKENIZER_FILE, Tokenizer
from biotf.untrusted import check_finite

__all__ = ["load_checkpoint", "load_exported"]

LAYER = re.compile(r"blocks\.(\d+)\.(.*)")


# --- config against weights -------------------------------------------------------------------
class _ShapesOnly(TorchFunctionMode):
    """Builds a model for its parameter names and shapes only: tensors of more than `LARGE` elements are
    allocated on the meta device (no memory), smaller ones stay real because modules may compute with them
    while they are built (ALiBi's slopes), and initialisers do nothing (they only cost time)."""

    LARGE = 1 << 16
    FACTORIES = {torch.empty, torch.zeros, torch.ones, torch.full, torch.rand, torch.randn}
    INITIALISERS = {"normal_", "uniform_", "zero_", "fill_", "ones_", "zeros_", "trunc_normal_"}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if getattr(func, "__name__", "") in self.INITIALISERS:
            return args[0] if args else kwargs["tensor"]
        if func in self.FACTORIES:
            size = args[0] if args and isinstance(args[0], (tuple, list, torch.Size)) else args
            if math.prod(int(n) for n in size if isinstance(n, int)) > self.LARGE:
                kwargs["device"] = "meta"
        return func(*args, **kwargs)


def _check_shapes(config: TransformerConfig, state: dict[str, torch.Tensor], source: str) -> None:
    """Refuse a config that does not describe `state`, without allocating its model: a one-layer model built
    for its shapes gives those outside the blocks and those of every block (but the contact head's, which has a
    weight per layer and head: that comes from the head built alone, n_layers x n_heads + 1 numbers)."""
    with _ShapesOnly():
        one_layer = Transformer(replace(config, n_layers=1)).state_dict()
        if config.contact_head:
            one_layer.update({f"contact_head.{name}": tensor
                              for name, tensor in ContactHead(config).state_dict().items()})
    layers = {int(match.group(1)) for match in map(LAYER.fullmatch, state) if match}
    blocks = 1 if config.share_layers else config.n_layers  # one block serves every layer when shared
    if len(layers) != blocks or (layers and max(layers) != blocks - 1):
        shared = ", share_layers: one block" if config.share_layers else ""
        raise CheckpointError(f"{source}: weights do not fit the stored model config (n_layers={config.n_layers}"
                              f"{shared}, the weights hold {len(layers)} layers)")
    for name, tensor in state.items():
        match = LAYER.fullmatch(name)
        expected = one_layer.get(f"blocks.0.{match.group(2)}" if match else name)
        if expected is not None and tuple(expected.shape) != tuple(tensor.shape):
            raise CheckpointError(f"{source}: weights do not fit the stored model config ({name} has shape "
                                  f"{tuple(tensor.shape)}, the config implies {tuple(expected.shape)})")


def _model(config: dict[str, Any], state: dict[str, torch.Tensor], source: str) -> Transformer:
    try:
        model_config = TransformerConfig.from_dict(config)
    except (ConfigError, TypeError) as error:  # a stored config that was edited, or written by another version
        raise CheckpointError(f"{source}: the stored model config is invalid: {error}") from None
    _check_shapes(model_config, state, source)
    model = Transformer(model_config)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as error:
        first = str(error).splitlines()[0]
        raise CheckpointError(f"{source}: weights do not fit the stored model config ({first})") from None
    return model.eval()



def load_checkpoint(path: str | Path) -> tuple[Transformer, Tokenizer]:
    """Model and tokenizer from a biotf Lightning checkpoint file."""
    path = Path(path)
    checkpoint = read_checkpoint(path)
    payload = checkpoint.get(CHECKPOINT_KEY) if isinstance(checkpoint, dict) else None
    if payload is None or "state_dict" not in checkpoint:
        raise CheckpointError(f"{path} is not a biotf language-model checkpoint (no '{CHECKPOINT_KEY}' section); a "
                              f"fine-tuning run's model loads from its run directory or its {FINETUNED_MODEL_DIR}/")
    tokenizer = tokenizer_from_payload(payload, str(path))
    state = {k[len(STATE_PREFIX):]: v for k, v in checkpoint["state_dict"].items() if k.startswith(STATE_PREFIX)}
    check_finite(state.items(), path)
    return _model(payload["model"], state, str(path)), tokenizer


def load_exported(directory: str | Path) -> tuple[Transformer, Tokenizer]:
    """Model and tokenizer from a directory written by `save_pretrained` / `biotf export-model`."""
    directory = Path(directory)
    config, state = read_exported(directory)
    tokenizer = load_tokenizer(directory / TOKENIZER_FILE)
    ensure_same_tokenizer(payload_fingerprint(config, str(directory / CONFIG_FILE)), tokenizer,
                          str(directory / CONFIG_FILE), candidate=str(directory / TOKENIZER_FILE))
    return _model(config["model"], state, str(directory / CONFIG_FILE)), tokenizer

