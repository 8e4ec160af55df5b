"""Reading a Hugging Face checkpoint: config.json and the weights (safetensors, sharded or not, read lazily; or a
pytorch_model.bin read with `torch.load(weights_only=True)`, which unpickles tensors only, never code). A .bin in
torch's zip format (torch >= 1.6) is memory-mapped; one in the legacy format before it (a bare pickle, as
`rxnfp`'s BERT ships) cannot be, and is read whole, through the same restricted unpickler.

Rotary inverse frequencies are taken from the checkpoint when it stores them, under any of the names
transformers has written: one shared `...rotary_embeddings.inv_freq` / `model.rotary_emb.inv_freq`, one per layer
(`...layer.{i}...`, which must agree), or the literal `layer.*` form of transformers 5's `save_pretrained`. Official
ESM-2 checkpoints store values rounded to float16 (they were trained in it) and HF computes with those: recomputing
them from rope_theta moves ESM-2 8M's logits by up to 0.1. Without a stored tensor they are computed from rope_theta.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from biotf.errors import CheckpointError
from biotf.model.config import TransformerConfig
from biotf.untrusted import check_finite, contained, load_tensors, open_safetensors, read_json_object

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
PICKLE_WEIGHTS_FILE = "pytorch_model.bin"
# config.json's fields that choose what is loaded, checked before they are used; the rest are checked as the
# model's config is built from them (`load_hf`).
HF_CONFIG_TYPES = {"model_type": str, "architectures": list}


# --- reading ------------------------------------------------------------------------------------
def read_hf_config(directory: Path) -> dict[str, Any]:
    path = directory / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(f"{directory} is not a Hugging Face model directory: no {CONFIG_FILE}")
    return read_json_object(path, "model config", CheckpointError, types=HF_CONFIG_TYPES)


class SafetensorsWeights(Mapping[str, torch.Tensor]):
    """The tensors of safetensors files, each read (memory-mapped) only when looked up.

    Lazy so that a mapping function which fuses tensors (q/k/v, gate/up) drops each source right after
    use: loading never holds a second full copy of the weights (issue 6: peak RSS <= 1.3x their size).
    A conversion to `dtype` that shrinks a tensor happens here, before fusing; one that grows it is left
    to the loader (`load_hf`), in the same copy as any other conversion it makes.
    """

    def __init__(self, files: Mapping[str, Path], dtype: torch.dtype | None = None):
        self._files, self._dtype = dict(files), dtype

    def stored(self, name: str) -> torch.Tensor:
        """The tensor in the dtype of its file."""
        # A file opened per tensor: a tensor keeps its file's mapping alive, so with one shared handle the pages
        # of every fused (freed) source would stay resident as long as any unfused tensor lives.
        with open_safetensors(self._files[name]) as handle:
            tensor = handle.get_tensor(name)
        check_finite([(name, tensor)], self._files[name])
        return tensor

    def __getitem__(self, name: str) -> torch.Tensor:
        tensor = self.stored(name)
        if self._dtype is None or tensor.element_size() < self._dtype.itemsize:
            return tensor
        return tensor.to(self._dtype)

    def __iter__(self):
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)


def read_weights(directory: Path, dtype: torch.dtype | None = None) -> Mapping[str, torch.Tensor]:
    """All tensors of model.safetensors, or of the shards listed by model.safetensors.index.json (lazily), or
    of pytorch_model.bin (memory-mapped unless in torch's legacy format; `weights_only=True` refuses anything but
    tensors and plain values)."""
    def names(file: Path) -> list[str]:
        with open_safetensors(file) as handle:
            return list(handle.keys())

    if (directory / WEIGHTS_FILE).is_file():
        return SafetensorsWeights(dict.fromkeys(names(directory / WEIGHTS_FILE), directory / WEIGHTS_FILE), dtype)
    if (directory / INDEX_FILE).is_file():
        index = read_json_object(directory / INDEX_FILE, "weights index", CheckpointError, types={"weight_map": dict})
        if not all(isinstance(shard, str) for shard in index.get("weight_map", {}).values()):
            raise CheckpointError(f"cannot read weights index {directory / INDEX_FILE}: its weight_map must map "
                                  "tensor names to shard file names")
        files: dict[str, Path] = {}
        for shard in sorted(set(index.get("weight_map", {}).values())):
            if not contained(directory, shard, directory / INDEX_FILE, "shard", CheckpointError).is_file():
                raise CheckpointError(f"{directory / INDEX_FILE} lists shard {shard}, which is missing")
            files.update(dict.fromkeys(names(directory / shard), directory / shard))
        missing = sorted(set(index.get("weight_map", {})) - set(files))
        if missing:
            raise CheckpointError(f"{directory}: tensors listed in {INDEX_FILE} but absent from the shards: "
                                  f"{missing[:5]}")
        return SafetensorsWeights(files, dtype)
    if (directory / PICKLE_WEIGHTS_FILE).is_file():
        file = directory / PICKLE_WEIGHTS_FILE
        weights = load_tensors(file, "weights", map_location="cpu", mmap=zipfile.is_zipfile(file))
        check_finite(weights.items() if isinstance(weights, dict) else (), file)
        return weights
    found = sorted(p.name for p in directory.iterdir())
    raise CheckpointError(f"{directory} has no {WEIGHTS_FILE} or {INDEX_FILE}, nor a {PICKLE_WEIGHTS_FILE} "
                          f"(found: {found})")


def hf_object_config_and_weights(model: Any) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    config = model.config.to_dict()
    config["architectures"] = [type(model).__name__]  # as save_pretrained writes it
    return config, dict(model.state_dict())


def stored_inverse_frequency(weights: Mapping[str, torch.Tensor], pattern: str,
                             config: TransformerConfig) -> dict[str, torch.Tensor]:
    """`{"positions.inverse_frequency": tensor}` when the checkpoint stores rotary inverse frequencies under a name
    matching `pattern` (a regex), else {}. Several copies (one per layer) must be equal; each must have
    head_dim / 2 values."""
    found = [name for name in weights if re.fullmatch(pattern, name)]
    if not found or config.pos != "rope":
        return {}
    # As stored: `SafetensorsWeights` would round them to a smaller loading dtype, and they stay float32.
    stored = weights.stored if isinstance(weights, SafetensorsWeights) else weights.__getitem__
    first = stored(found[0])
    if tuple(first.shape) != (config.head_dim // 2,):
        raise CheckpointError(f"rotary inverse frequencies {found[0]} have shape {tuple(first.shape)}, the config "
                              f"implies ({config.head_dim // 2},)")
    for name in found[1:]:
        if not torch.equal(stored(name).to(first.dtype), first):
            raise CheckpointError(f"the checkpoint stores different rotary inverse frequencies in {found[0]} and "
                                  f"{name}; biotf uses one set for every layer")
    return {"positions.inverse_frequency": first.to(torch.float32)}
