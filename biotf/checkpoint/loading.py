"""`load_pretrained`: a model and its tokenizer from a run directory, a checkpoint or an exported directory.

    model, tokenizer = biotf.load_pretrained("outputs/protein_mlm/2026-11-29_18-00-00_123456")

Sources, tried in order (`MODEL_SOURCES`):
- a fine-tuning run directory (holds `model/task.json`) or its export `model/` (holds `task.json`): the exported,
  fine-tuned trunk, once every file of the export, the head's too, is checked (`task_export.read_task_files`);
- a training run directory (holds `checkpoints/`): its `best.ckpt` (lowest validation loss), else
  `last.ckpt`;
- a Lightning checkpoint file `*.ckpt` written by biotf training;
- an exported directory (`biotf export-model`): `config.json`, `model.safetensors`, `tokenizer.json`;
- a Hugging Face checkpoint directory (Qwen2, or ESM with its vocab.txt; `hf_directory.load_hf_model`);
- a fair-esm `.pt` file (ESM-2, ESM-1b, ESM-1v, as `esm.pretrained` downloads it; `biotf.model.hf.fair_esm`).

The file formats, their checksums and the tokenizer check live in `biotf.checkpoint`; this module
turns them into models. The stored config is checked against the weights' shapes before the model is
allocated (`_check_shapes`), so a damaged or edited config (vocab_size 1e8, n_layers 1e6) fails in
milliseconds naming the mismatch rather than after allocating gigabytes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch.overrides import TorchFunctionMode

from biotf.checkpoint import (CHECKPOINT_DIR, CHECKPOINT_KEY, CONFIG_FILE, FINETUNED_MODEL_DIR, STATE_PREFIX,
                              TASK_FILE, ensure_same_tokenizer, payload_fingerprint, read_checkpoint, read_exported,
                              tokenizer_from_payload)
from biotf.checkpoint.digest import model_fingerprint
from biotf.checkpoint.task_export import TaskInfo, read_task_files
from biotf.errors import CheckpointError, ConfigError
from biotf.checkpoint.hf_directory import is_hf_directory, load_hf_model
from biotf.model import Transformer, TransformerConfig
from biotf.model.heads import ContactHead, TaskModel
from biotf.model.hf.fair_esm import is_fair_esm_file
from biotf.tokenizers import AminoAcidTokenizer, load_tokenizer
from biotf.tokenizers.build import with_options
from biotf.tokenizers.base import TOKENIZER_FILE, Tokenizer
from biotf.untrusted import check_finite, read_json_object

__all__ = ["MODEL_SOURCES", "LoadedModel", "ModelSource", "Pretrained", "as_loaded", "find_source", "load_pretrained"]

LAYER = re.compile(r"blocks\.(\d+)\.(.*)")


class Pretrained(NamedTuple):
    """What `load_pretrained` returns; unpacks as `model, tokenizer = ...`."""

    model: Transformer
    tokenizer: Tokenizer


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


# --- loaders ------------------------------------------------------------------------------------
def load_checkpoint(path: str | Path) -> Pretrained:
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
    checkpoint = run_checkpoint(run_dir)
    loaded = load_checkpoint(checkpoint)
    side_file = Path(run_dir) / TOKENIZER_FILE
    if side_file.is_file():
        ensure_same_tokenizer(loaded.tokenizer.fingerprint, load_tokenizer(side_file), str(checkpoint),
                              candidate=str(side_file))
    return loaded


def load_exported(directory: str | Path) -> Pretrained:
    """Model and tokenizer from a directory written by `save_pretrained` / `biotf export-model`."""
    directory = Path(directory)
    config, state = read_exported(directory)
    tokenizer = load_tokenizer(directory / TOKENIZER_FILE)
    ensure_same_tokenizer(payload_fingerprint(config, str(directory / CONFIG_FILE)), tokenizer,
                          str(directory / CONFIG_FILE), candidate=str(directory / TOKENIZER_FILE))
    return Pretrained(_model(config["model"], state, str(directory / CONFIG_FILE)), tokenizer)


def load_fine_tuned(source: str | Path) -> Pretrained:
    """The fine-tuned trunk and tokenizer of a fine-tuning run or of its export `<run>/model/` (LoRA merged), which
    `biotf predict` reads with the task head. The head's files are checked too, though only the trunk is returned:
    a damaged export is refused by whichever tool reads it."""
    directory = Path(source)
    if _is_fine_tuning_run(directory):
        directory = directory / FINETUNED_MODEL_DIR
    read_task_files(directory)
    return load_exported(directory)


def _is_fine_tuning_run(path: Path) -> bool:
    return path.is_dir() and (path / FINETUNED_MODEL_DIR / TASK_FILE).is_file()


def _is_fine_tuned_export(path: Path) -> bool:
    return path.is_dir() and (path / TASK_FILE).is_file()


def _is_run_dir(path: Path) -> bool:
    return path.is_dir() and (path / CHECKPOINT_DIR).is_dir()


def _is_checkpoint(path: Path) -> bool:
    return path.is_file() and path.suffix == ".ckpt"


def _is_exported(path: Path) -> bool:
    """A directory whose config.json says `biotf_format`; a config.json that is no JSON object is refused here,
    naming it, as no loader could read its directory."""
    if not (path / CONFIG_FILE).is_file():
        return False
    return "biotf_format" in read_json_object(path / CONFIG_FILE, "model config", CheckpointError)


def load_hf_directory(directory: str | Path) -> Pretrained:
    """Model (float32) and tokenizer of a Hugging Face Qwen2 or ESM checkpoint directory (`hf_directory`)."""
    return Pretrained(*load_hf_model(directory))


def load_fair_esm(path: str | Path) -> Pretrained:
    """Model (float32) of a fair-esm `.pt` file (ESM-2, ESM-1b, ESM-1v), with biotf's protein tokenizer, whose 33
    tokens are fair-esm's alphabet in its order."""
    return Pretrained(Transformer.from_hf(path), AminoAcidTokenizer())


class ModelSource(NamedTuple):
    """One kind of model source: what it is called, how it is recognised, how it loads."""

    name: str
    detect: Callable[[Path], bool]
    load: Callable[[Path], Pretrained]


# The first loader whose `detect(path)` is true loads it. Extend by appending.
MODEL_SOURCES: list[ModelSource] = [
    ModelSource("fine-tuning run directory", _is_fine_tuning_run, load_fine_tuned),
    ModelSource("fine-tuned export", _is_fine_tuned_export, load_fine_tuned),
    ModelSource("run directory", _is_run_dir, load_run),
    ModelSource("checkpoint", _is_checkpoint, load_checkpoint),
    ModelSource("exported directory", _is_exported, load_exported),
    ModelSource("Hugging Face directory (Qwen2, ESM)", is_hf_directory, load_hf_directory),
    ModelSource("fair-esm checkpoint (.pt)", is_fair_esm_file, load_fair_esm),
]


def find_source(source: str | Path) -> ModelSource:
    """The loader of `source`: the first of `MODEL_SOURCES` that recognises it; an error names every kind otherwise."""
    path = Path(source)
    if not path.exists():
        raise CheckpointError(f"model source {path} does not exist")
    for loader in MODEL_SOURCES:
        if loader.detect(path):
            return loader
    kinds = ", ".join(loader.name for loader in MODEL_SOURCES)
    raise CheckpointError(f"cannot load a model from {path} (allowed: {kinds})")


def load_pretrained(source: str | Path, tokenizer: Tokenizer | None = None, device: str | torch.device = "cpu",
                    tokenizer_options: Mapping[str, Any] | None = None) -> Pretrained:
    """The model (eval mode, on `device`) and its tokenizer from any source of `MODEL_SOURCES`.

    Passing `tokenizer` checks it against the one the weights were trained with (and returns it).
    `tokenizer_options` change policies of the tokenizer (`with_options`: `unknown="to_unk"`, ...; never its
    vocabulary), what `--option` of embed, score and predict and `finetune.tokenizer_options` set.
    """
    path = Path(source)
    model, stored = find_source(path).load(path)
    if tokenizer is not None:
        ensure_same_tokenizer(stored.fingerprint, tokenizer, str(path))
    return Pretrained(model.to(device), with_options(tokenizer or stored, tokenizer_options or {}))


@dataclass
class LoadedModel:
    """A model in memory with its tokenizer and where it came from (`source`, and `kind`: a `MODEL_SOURCES` name):
    what every job over records runs with. `biotf.Model` is one (and adds the jobs); a fine-tuned one also carries
    its `task` model (whose trunk is `network`) and `task_info`."""

    network: Transformer
    tokenizer: Tokenizer
    source: str | None = None
    kind: str = "in memory"
    task: TaskModel | None = None
    task_info: TaskInfo | None = None
    tokenizer_options: dict[str, Any] = field(default_factory=dict)  # the policies changed at load (`with_options`)


def inference_precision(loaded: LoadedModel) -> dict[str, str]:
    """What `loaded`'s network computes in: `precision` (fp32 | bf16 | int8 | fp16) and, where the name says less
    than how it was made (int8), `precision_scheme`: the choice `biotf.Model.load` converted it with (a `biotf.Model`
    carries it as `precision`, `PrecisionChoice.identity`), else its weights' dtype (a model loaded in bfloat16)."""
    choice = getattr(loaded, "precision", None)
    if choice is not None and choice.precision != "fp32":
        return choice.identity()
    dtype = next(loaded.network.parameters()).dtype
    return {"precision": {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "fp32")}


def model_identity(model: torch.nn.Module, loaded: LoadedModel) -> dict[str, str]:
    """What every output records of the model that made it (embedding info, sharded manifests): the precision it
    computed in (and int8's scheme) and the fingerprint of `model` (`loaded`'s network, or a fine-tuned one's task
    model). A change of precision changes the fingerprint too; the precision is what names it."""
    return {**inference_precision(loaded), "model_fingerprint": model_fingerprint(model)}


def as_loaded(model: str | Path | LoadedModel | Callable[[], LoadedModel], device: str | torch.device | None = None,
              tokenizer_options: Mapping[str, Any] | None = None) -> LoadedModel:
    """`model` itself when it is loaded already (moved to `device` if one is given, its tokenizer's policies changed
    by `tokenizer_options`), what a loader returns when called now (the commands pass `biotf.Model.load` so, called
    after the job's own checks), else the model of that source on `device` (default cpu; `load_pretrained`): so
    that a job takes a path as well as a model the caller loaded once."""
    if callable(model):
        model = model()
    if isinstance(model, LoadedModel):
        if device is not None:
            model.network.to(device)
        if tokenizer_options:
            model = replace(model, tokenizer=with_options(model.tokenizer, tokenizer_options),
                            tokenizer_options={**model.tokenizer_options, **tokenizer_options})
        return model
    network, tokenizer = load_pretrained(model, device=device or "cpu", tokenizer_options=tokenizer_options)
    return LoadedModel(network, tokenizer, str(model), find_source(model).name,
                       tokenizer_options=dict(tokenizer_options or {}))
