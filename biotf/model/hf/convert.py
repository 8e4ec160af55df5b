"""Loading a Hugging Face model (object or directory) into biotf's Transformer, and writing one back, through the
family its config.json's `model_type` names (`biotf.model.hf.families`)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from os import PathLike
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from biotf.errors import CheckpointError, ConfigError
from biotf.model.config import TransformerConfig
from biotf.model.hf.fair_esm import FAIR_ESM_SUFFIX, is_fair_esm_file, read_fair_esm
from biotf.model.hf.families import FAMILIES, WRITABLE_FAMILIES
from biotf.model.hf.family import CONFIG_FIELD_TYPES
from biotf.untrusted import wrong_types
from biotf.model.hf.weights import (CONFIG_FILE, WEIGHTS_FILE, hf_object_config_and_weights, read_hf_config,
                                   read_weights)
from biotf.naming import parameter

# biotf's Transformer, which `Transformer.from_hf` / `to_hf` hand in: this package never imports transformer.py,
# which calls into it.
Model = TypeVar("Model", bound=nn.Module)


# How a parameter is materialised from its source tensor: (meta model, name, source, dtype) -> tensor.
Materialise = Callable[[nn.Module, str, torch.Tensor, torch.dtype], torch.Tensor]


def load_hf(model_class: type[Model], model_or_directory: Any, dtype: torch.dtype = torch.float32,
            materialise: Materialise | None = None) -> Model:
    """A `model_class` (biotf's Transformer) with the weights of a HF model object or model directory (see
    `biotf.model.hf`), or of a fair-esm `.pt` file (`fair_esm`, read as the ESM family). Each parameter is
    `materialise(model, name, source, dtype)` (default `source.to(dtype)`), one at a time: a conversion that copies
    (a wider dtype, another memory layout) then holds one extra tensor at most."""
    shared = False  # whether the tensors are a live model's, which the loaded model must not share
    if isinstance(model_or_directory, (str, PathLike)) and is_fair_esm_file(model_or_directory):
        hf_config, weights = read_fair_esm(model_or_directory)
        directory = None
    elif isinstance(model_or_directory, (str, PathLike)):
        directory = Path(model_or_directory)
        if not directory.is_dir():
            raise CheckpointError(f"{directory} is not a directory (nor a fair-esm {FAIR_ESM_SUFFIX} file)")
        hf_config = read_hf_config(directory)
        weights = None
    elif hasattr(model_or_directory, "config") and hasattr(model_or_directory, "state_dict"):
        hf_config, weights = hf_object_config_and_weights(model_or_directory)
        directory, shared = None, True
    else:
        raise CheckpointError(f"from_hf needs a transformers model or a directory, got "
                              f"{type(model_or_directory).__name__}")
    config = hf_model_config(directory, hf_config)
    family = FAMILIES[hf_config["model_type"]]
    if weights is None:
        weights = read_weights(directory, dtype)
    state = family.to_biotf(weights, config)
    del weights  # the sources of fused tensors go now, not at return
    if not config.contact_head and any(name.startswith("contact_head.") for name in state):
        config = config.replace(contact_head=True)  # a head the weights carry (ESM-2's), not one config.json names
    with torch.device("meta"):
        model = model_class(config)
    expected = model.state_dict()
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise CheckpointError(f"tensor for {name} has shape {tuple(tensor.shape)}, the config implies "
                                  f"{tuple(expected[name].shape)}")
    # One tensor at a time, each source dropped as it goes. Tensors read from files are fresh (memory-mapped
    # copy-on-write); those of a model object are copied so that the two never share.
    # Parameters take `dtype`; buffers keep the dtype the model gives them (rotary frequencies stay float32).
    parameters = dict(model.named_parameters())
    for name in list(state):
        source = state.pop(name).detach()
        if name not in parameters:
            tensor = source.to(dtype=expected[name].dtype)
        else:
            tensor = source.to(dtype=dtype) if materialise is None else materialise(model, name, source, dtype)
        state[name] = tensor.clone() if shared and tensor is source else tensor
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval()


def hf_model_config(directory: Path | None, hf_config: Mapping[str, Any]) -> TransformerConfig:
    """The TransformerConfig a directory's config.json describes, or one CheckpointError naming config.json and the
    field: loaders call it before reading the tokenizer or any weight, so that a bad value (`n_embd: 32.5`, a size
    no machine can allocate) is reported as what it is. A biotf field refused (`d_model`) is named by the
    config.json field that holds its value (`n_embd`). `directory` None: a transformers model object's config, whose
    errors are not the user's file's and propagate as they are."""
    model_type = hf_config.get("model_type")
    if model_type not in FAMILIES:
        raise CheckpointError(f"model_type {model_type!r} is not supported (supported: {', '.join(FAMILIES)})")
    wrong = wrong_types(hf_config, CONFIG_FIELD_TYPES)
    if wrong is not None:
        where = "config" if directory is None else directory / CONFIG_FILE
        raise CheckpointError(f"{where} does not describe a {model_type} model biotf can build: {wrong}")
    try:
        return FAMILIES[model_type].config(hf_config)
    except CheckpointError as error:  # a family's refusal of a field ("GPT-2 config n_embd=32.5 is not supported")
        if directory is None:
            raise
        raise CheckpointError(f"{directory / CONFIG_FILE}: {error}") from None
    except (KeyError, TypeError, ValueError, AttributeError, ZeroDivisionError) as error:
        if directory is None:
            raise
        reason = f"it has no {error}" if isinstance(error, KeyError) else str(error)
        fields = [key for key, value in hf_config.items() if isinstance(error, ConfigError)
                  and type(value) is type(error.value) and value == error.value]
        if fields:
            why = "; ".join(filter(None, (error.reason, error.allowed and f"allowed: {error.allowed}")))
            reason = f"{' / '.join(fields)}={error.value!r} (biotf's {error.key}): {why}"
        raise CheckpointError(f"{directory / CONFIG_FILE} does not describe a {model_type} model biotf can build: "
                              f"{reason}") from None


def check_hf_writable(config: TransformerConfig) -> None:
    """Refuse (ConfigError) what no family can hold, before any family is tried: a convolutional stem has no Hugging
    Face equivalent (every family's `check_holds` would refuse it too, one family at a time)."""
    if config.stem != "none":
        raise ConfigError("model.stem", config.stem, "none", reason="no Hugging Face architecture has a convolutional "
                          f"stem; save the model in biotf's own format (biotf export-model without {parameter('hf')})")


def save_hf(model: nn.Module, directory: str | PathLike, model_type: str | None = None) -> None:
    """Write `model` as a checkpoint of family `model_type` (config.json + model.safetensors, float tensors as they
    are) that `transformers` loads. None: the first family, in `FAMILIES` order, that can hold the model's config;
    a named family that cannot is refused, naming the field."""
    from safetensors.torch import save_file

    check_hf_writable(model.config)
    if model_type is not None and model_type not in WRITABLE_FAMILIES:
        raise CheckpointError(f"biotf cannot write model_type {model_type!r} (it writes: "
                              f"{', '.join(WRITABLE_FAMILIES)})")
    candidates = [WRITABLE_FAMILIES[model_type]] if model_type is not None else list(WRITABLE_FAMILIES.values())
    refusals = []
    for family in candidates:
        try:
            hf_config = family.export_config(model.config)
            break
        except CheckpointError as error:
            refusals.append(str(error))
    else:
        raise CheckpointError(refusals[0] if len(refusals) == 1 else "no Hugging Face family holds this model: "
                              + "; ".join(refusals))
    tensors = family.from_biotf(model.state_dict(), model.config)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    dtypes = {t.dtype for t in tensors.values()}
    if len(dtypes) == 1:
        hf_config["torch_dtype"] = hf_config["dtype"] = str(dtypes.pop()).removeprefix("torch.")
    save_file({name: t.detach().contiguous().cpu() for name, t in tensors.items()}, directory / WEIGHTS_FILE,
              metadata={"format": "pt"})
    (directory / CONFIG_FILE).write_text(json.dumps(hf_config, indent=2) + "\n")
