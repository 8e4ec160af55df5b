"""A CRC-32 of a checkpoint's content, so that damaged bytes are refused instead of loaded.

torch.load does not check its zip records' CRCs and safetensors has none: 100 zeroed bytes inside a
weight tensor load silently (and training would resume on them). The digest walks the checkpoint as
it is saved and as it is loaded, the same way: every tensor's dtype, shape and raw bytes, every key,
and the repr of every other value (ints, floats, strings: the step counters and loop states), so a
change anywhere in what is read back changes it. CRC-32 (zlib, as the token cache uses) finds
accidental damage, which is what it is for; its cost is paid at each write and load, never per training
step (docs/benchmarks.md).
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Mapping
from typing import Any

import torch

DIGEST_KEY = "biotf_crc32"


def content_crc32(value: Any, crc: int = 0) -> int:
    """CRC-32 of a nested structure of mappings, sequences, tensors and plain values."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous().reshape(-1)
        crc = zlib.crc32(f"tensor {tensor.dtype} {tuple(value.shape)}".encode(), crc)
        return zlib.crc32(tensor.view(torch.uint8).numpy(), crc) if tensor.numel() else crc
    if isinstance(value, Mapping):
        crc = zlib.crc32(b"{", crc)
        for key, item in value.items():
            crc = content_crc32(item, zlib.crc32(repr(key).encode(), crc))
        return zlib.crc32(b"}", crc)
    if isinstance(value, (list, tuple)):
        crc = zlib.crc32(b"[", crc)
        for item in value:
            crc = content_crc32(item, crc)
        return zlib.crc32(b"]", crc)
    if isinstance(value, (set, frozenset)):  # iteration order follows string hashing, which varies per process
        return zlib.crc32(repr(sorted(map(repr, value))).encode(), crc)
    return zlib.crc32(repr(value).encode(), crc)


def model_fingerprint(model: torch.nn.Module) -> str:
    """A short hex digest of a model's config (where it has one) and every weight: what `biotf embed` records in its
    files, so that vectors are only compared with vectors of the same model (`biotf search` refuses others)."""
    config = getattr(model, "config", None)
    described = config.to_dict() if hasattr(config, "to_dict") else None
    digest = hashlib.blake2b(json.dumps(described, sort_keys=True, default=str).encode(), digest_size=8)
    digest.update(content_crc32(model.state_dict()).to_bytes(4, "little"))
    return digest.hexdigest()
