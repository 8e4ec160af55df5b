"""What biotf knows of one Hugging Face model family (one `model_type`): the architectures it reads, which of them
are causal language models, and the functions that translate its config.json and tensors to biotf's and back."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import torch

from biotf.model.config import TransformerConfig

ConfigReader = Callable[[Mapping[str, Any]], TransformerConfig]
TensorMap = Callable[[Mapping[str, torch.Tensor], TransformerConfig], dict[str, torch.Tensor]]


class Family(NamedTuple):
    """One family. `config` refuses (CheckpointError naming the field) what the transformer cannot express;
    `to_biotf` renames and fuses tensors, looking each up once (a lazy mapping then frees sources as it goes).
    `export_config` / `from_biotf` write a biotf model in this family's form (None: biotf does not write it);
    `export_config` refuses a biotf config the family cannot hold, naming the field."""

    model_type: str
    architectures: tuple[str, ...]
    causal: tuple[str, ...]
    config: ConfigReader
    to_biotf: TensorMap
    export_config: Callable[[TransformerConfig], dict[str, Any]] | None = None
    from_biotf: TensorMap | None = None
