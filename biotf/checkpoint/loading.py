"""Every kind of model source biotf reads, in one table, and what loading one gives: a `LoadedModel`.

    model = biotf.Model.load("outputs/protein_mlm/2026-11-29_18-00-00_123456")   # what users call

Sources, tried in order (`MODEL_SOURCES`):
- a fine-tuning run directory (holds `model/task.json`) or its export `model/` (holds `task.json`): the exported,
  fine-tuned trunk with its task head, once every file of the export, the head's too, is checked
  (`task_model.load_task_model`);
- a training run directory (holds `checkpoints/`): its `best.ckpt` (lowest validation loss), else
  `last.ckpt`;
- a Lightning checkpoint file `*.ckpt` written by biotf training;
- an exported directory (`biotf export-model`): `config.json`, `model.safetensors`, `tokenizer.json`;
- a Hugging Face checkpoint directory (Qwen2, or ESM with its vocab.txt; `hf_directory.load_hf_model`), whose
  generation settings are read when generation is asked for (`LoadedModel.generation_settings`);
- a fair-esm `.pt` file (ESM-2, ESM-1b, ESM-1v, as `esm.pretrained` downloads it; `biotf.model.hf.fair_esm`).

Each source's loader returns the same thing, a `LoadedModel`: `load_source` finds the source once and loads it, what
`biotf.Model.load` and every job given a path (`as_loaded`) read a model with. A biotf checkpoint's or export's files
become a model in `biotf.checkpoint.stored_model`. `load_pretrained` is a deprecated alias kept for one release.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache, partial
from pathlib import Path
from typing import Any, NamedTuple

import torch

from biotf.checkpoint import CHECKPOINT_DIR, CONFIG_FILE, FINETUNED_MODEL_DIR, TASK_FILE, ensure_same_tokenizer
from biotf.checkpoint.digest import model_fingerprint
from biotf.checkpoint.hf_directory import GenerationSettings, is_hf_directory, load_hf_model, read_generation_settings
from biotf.checkpoint.stored_model import load_checkpoint, load_exported
from biotf.checkpoint.task_export import TaskInfo
from biotf.checkpoint.task_model import load_task_model
from biotf.errors import CheckpointError
from biotf.model import Transformer, TransformerConfig
from biotf.model.heads import TaskModel
from biotf.model.hf import Materialise, hf_model_config
from biotf.model.hf.weights import read_hf_config
from biotf.model.hf.fair_esm import is_fair_esm_file
from biotf.tokenizers import AminoAcidTokenizer, load_tokenizer
from biotf.tokenizers.build import with_options
from biotf.tokenizers.base import TOKENIZER_FILE, Tokenizer
from biotf.untrusted import read_json_object

__all__ = ["MODEL_SOURCES", "LoadedModel", "ModelSource", "Pretrained", "SourceOptions", "as_loaded", "find_source",
           "load_pretrained", "load_source"]


@dataclass
class LoadedModel:
    """A model in memory with its tokenizer and where it came from (`source`, and `kind`: a `MODEL_SOURCES` name):
    what every job over records runs with, and what every source's loader returns. `biotf.Model` is one (and adds
    the jobs); a fine-tuned one also carries its `task` model (whose trunk is `network`) and `task_info`; one whose
    source stores generation settings (a Hugging Face directory) carries their reader, `generation_settings`, called
    only when generation is asked for."""

    network: Transformer
    tokenizer: Tokenizer
    source: str | None = None
    kind: str = "in memory"
    task: TaskModel | None = None
    task_info: TaskInfo | None = None
    tokenizer_options: dict[str, Any] = field(default_factory=dict)  # the policies changed at load (`with_options`)
    generation_settings: Callable[[], GenerationSettings] | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class SourceOptions:
    """How a source is read: its weights in `dtype`; `for_generation`: a source that says what it can run (a Hugging
    Face directory's architecture) refuses a model that cannot generate before a weight is read; `materialise`: how a
    loader that reads tensor by tensor places each one (`biotf.inference.fast`'s decoding layout), None: as read;
    `before_weights`: called with the model's config after the source's checks and before such a loader reads any
    weight (generation times its decoding plan there, so that the plan's test matrices are freed before the weights
    fill memory)."""

    dtype: torch.dtype = torch.float32
    for_generation: bool = False
    materialise: Materialise | None = None
    before_weights: Callable[[TransformerConfig], object] | None = None


# --- one loader a kind of source, each returning a LoadedModel ---------------------------------------------
def _fine_tuned(source: Path, options: SourceOptions) -> LoadedModel:
    """A fine-tuning run or its export `<run>/model/` (LoRA merged): the trunk with its task head, which `predict`
    uses while the other jobs use the trunk; every file of the export, the head's too, is checked."""
    task, tokenizer, info = load_task_model(source)
    return LoadedModel(task.trunk, tokenizer, task=task, task_info=info)


def _run_checkpoint(run_dir: Path) -> Path:
    """The checkpoint a run directory stands for: best by validation loss, else the last one."""
    directory = run_dir / CHECKPOINT_DIR
    for name in ("best.ckpt", "last.ckpt"):
        if (directory / name).is_file():
            return directory / name
    raise CheckpointError(f"run directory {run_dir} has no checkpoints/best.ckpt or checkpoints/last.ckpt")


def _run(run_dir: Path, options: SourceOptions) -> LoadedModel:
    """A training run directory's checkpoint (its tokenizer.json must match the checkpoint's)."""
    checkpoint = _run_checkpoint(run_dir)
    network, tokenizer = load_checkpoint(checkpoint)
    side_file = run_dir / TOKENIZER_FILE
    if side_file.is_file():
        ensure_same_tokenizer(tokenizer.fingerprint, load_tokenizer(side_file), str(checkpoint),
                              candidate=str(side_file))
    return LoadedModel(network, tokenizer)


def _checkpoint(path: Path, options: SourceOptions) -> LoadedModel:
    return LoadedModel(*load_checkpoint(path))


def _exported(directory: Path, options: SourceOptions) -> LoadedModel:
    return LoadedModel(*load_exported(directory))


def _hf_directory(directory: Path, options: SourceOptions) -> LoadedModel:
    """A Hugging Face Qwen2 or ESM checkpoint directory (`hf_directory`), read in `options.dtype`; its generation
    settings are read when generation is asked for: at once `for_generation` (a directory biotf does not generate
    with is refused before its weights are read), else when a job first generates."""
    settings = cache(partial(read_generation_settings, directory))
    if options.for_generation:
        settings()
    if options.before_weights is not None:
        options.before_weights(hf_model_config(directory, read_hf_config(directory)))
    network, tokenizer = load_hf_model(directory, options.dtype, options.materialise)
    return LoadedModel(network, tokenizer, generation_settings=settings)


def _fair_esm(path: Path, options: SourceOptions) -> LoadedModel:
    """A fair-esm `.pt` file (ESM-2, ESM-1b, ESM-1v), with biotf's protein tokenizer, whose 33 tokens are fair-esm's
    alphabet in its order."""
    return LoadedModel(Transformer.from_hf(path), AminoAcidTokenizer())


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


class ModelSource(NamedTuple):
    """One kind of model source: what it is called, how it is recognised, how it loads: `load(path, options)` gives a
    `LoadedModel` of its network on the CPU (in `options.dtype` where the loader reads so; `load_source` converts
    the rest), its tokenizer and, where the source has them, task head and generation settings."""

    name: str
    detect: Callable[[Path], bool]
    load: Callable[[Path, SourceOptions], LoadedModel]


# The first loader whose `detect(path)` is true loads it. Extend by appending.
MODEL_SOURCES: list[ModelSource] = [
    ModelSource("fine-tuning run directory", _is_fine_tuning_run, _fine_tuned),
    ModelSource("fine-tuned export", _is_fine_tuned_export, _fine_tuned),
    ModelSource("run directory", _is_run_dir, _run),
    ModelSource("checkpoint", _is_checkpoint, _checkpoint),
    ModelSource("exported directory", _is_exported, _exported),
    ModelSource("Hugging Face directory (Qwen2, ESM)", is_hf_directory, _hf_directory),
    ModelSource("fair-esm checkpoint (.pt)", is_fair_esm_file, _fair_esm),
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


def load_source(source: str | Path, options: SourceOptions = SourceOptions(), device: str | torch.device = "cpu",
                tokenizer_options: Mapping[str, Any] | None = None) -> LoadedModel:
    """The model of `source`, found once in `MODEL_SOURCES` and loaded by its loader, in eval mode on `device` in
    `options.dtype` (its task head too); `tokenizer_options` change policies of its tokenizer (`with_options`:
    `unknown="to_unk"`, ...; never its vocabulary). What `biotf.Model.load` and `as_loaded` read a path with."""
    path = Path(source)
    kind = find_source(path)
    loaded = kind.load(path, options)
    loaded.network.to(device=device, dtype=options.dtype).eval()
    if loaded.task is not None:
        loaded.task.to(device=device, dtype=options.dtype).eval()
    return replace(loaded, source=str(source), kind=kind.name,
                   tokenizer=with_options(loaded.tokenizer, tokenizer_options or {}),
                   tokenizer_options=dict(tokenizer_options or {}))


class Pretrained(NamedTuple):
    """What `load_pretrained` returns; unpacks as `model, tokenizer = ...`."""

    model: Transformer
    tokenizer: Tokenizer


def load_pretrained(source: str | Path, tokenizer: Tokenizer | None = None, device: str | torch.device = "cpu",
                    tokenizer_options: Mapping[str, Any] | None = None) -> Pretrained:
    """Deprecated: `biotf.Model.load(source)` gives the same network (`.network`) and tokenizer (`.tokenizer`), with
    every job. Kept for one release, as scripts call it: the model (eval mode, on `device`) and its tokenizer;
    passing `tokenizer` checks it against the one the weights were trained with (and returns it)."""
    warnings.warn("biotf.load_pretrained is deprecated and will be removed in the next release: use "
                  "biotf.Model.load(source), whose .network and .tokenizer are what it returned",
                  DeprecationWarning, stacklevel=2)
    loaded = load_source(source, device=device)
    if tokenizer is not None:
        ensure_same_tokenizer(loaded.tokenizer.fingerprint, tokenizer, str(source))
    return Pretrained(loaded.network, with_options(tokenizer or loaded.tokenizer, tokenizer_options or {}))


def inference_precision(loaded: LoadedModel) -> dict[str, str]:
    """What `loaded`'s network computes in: `precision` (fp32 | bf16 | int8 | fp16) and, where the name says less
    than how it was made (int8) or computes (bf16's fused products), `precision_scheme`: the choice `biotf.Model.load`
    converted it with (a `biotf.Model` carries it as `precision`, `PrecisionChoice.identity`), else its weights'
    dtype (a model loaded in bfloat16)."""
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
    after the job's own checks), else the model of that source on `device` (default cpu; `load_source`, as
    `biotf.Model.load` reads it): so that a job takes a path as well as a model the caller loaded once."""
    if callable(model):
        model = model()
    if not isinstance(model, LoadedModel):
        return load_source(model, device=device or "cpu", tokenizer_options=tokenizer_options)
    if device is not None:
        model.network.to(device)
    if tokenizer_options:
        model = replace(model, tokenizer=with_options(model.tokenizer, tokenizer_options),
                        tokenizer_options={**model.tokenizer_options, **tokenizer_options})
    return model
