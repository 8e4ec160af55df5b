"""Structured training configs: the schema Hydra validates every override against.

`conf/config.yaml` starts its defaults list with `train_schema`, the `TrainConfig` dataclass below
registered in Hydra's ConfigStore, so each group YAML (`data/`, `trainer/`, `optim/`, `model/`)
merges into a typed node: an unknown key or a value of the wrong type fails while composing.
Allowed-value checks and cross-field checks run in `validate()`, which turns the composed
`DictConfig` into dataclasses (calling each `__post_init__`) before any data is read. The model
node *is* `biotf.model.TransformerConfig`, so its fields and checks live in one place.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from hydra.errors import MissingConfigException, OverrideParseException
from omegaconf import MISSING, DictConfig, OmegaConf

from biotf.data.long_policy import TRAINING_LONG_POLICIES
from biotf.errors import ConfigError, InputError, check_choice, check_int
from biotf.model.config import TransformerConfig
from biotf.conventions import SAMPLES_DIR
from biotf.chemistry import INVALID_SMILES
from biotf.tokenizers.build import check_tokenizer_config
from biotf.training.finetune_config import FinetuneConfig, check_finetune

PRECISIONS = ("32", "32-true", "bf16-mixed")
STRATEGIES = ("auto", "ddp", "fsdp")
ACCELERATORS = ("auto", "cpu", "gpu", "cuda", "mps")
LOGGERS = ("csv", "tensorboard")
NONFINITE_POLICIES = ("stop", "skip")
PROGRESS_FORMS = ("auto", "bar", "lines")  # trainer.progress (biotf.training.fit_progress)


@dataclass
class DataConfig:
    """Where the sequences come from and how they are batched.

    path: the input file (FASTA, GenBank, CSV/TSV, .smi or text; see `biotf.io.readers`).
    format / column / id_column: reader options (format from the extension when null).
    max_length: longest training sequence in tokens, specials included (<= model.max_seq_len); null (fine-tuning
    only) means the max_seq_len of init_from's model.
    long_policy: crop (a random window each time it is drawn) | drop (skipped and counted) | error.
    mask_probability: share of content tokens chosen for masked-LM targets (80/10/10 rule).
    label_column / label_pattern: where fine-tuning (`task`) reads each record's label.
    packing: masked-LM training packs several records into each row of max_length tokens (`biotf.data.packing`;
    batch_size then counts rows); each record attends to itself alone, so the loss is the padded batch's.
    Validation stays padded. Causal-LM training keeps its blocks of max_length records end to end but masks them by
    document (`PackedBlockDataset`'s document_masking): each record is `<eos> record <eos>`, attends to itself
    alone with positions from 0, and its loss is that sequence's run alone; the last `<eos>`'s target (the next
    record) is not trained, and a record cut by a block boundary continues as a new segment. Validation blocks are
    built the same way. false (default): records joined by `<eos>` attend across records, as before.
    invalid_smiles: fine-tuning, what a SMILES RDKit cannot parse does where a step parses molecules (the scaffold
    split): error (default, one line naming the record) | skip (left out of the run, counted and listed by id in
    finetune.json), as MoleculeNet leaves BBBP's 11 unparsable SMILES out of its scaffold split.
    """

    path: str = MISSING
    format: Optional[str] = None
    column: Optional[str] = None
    id_column: Optional[str] = None
    validation_fraction: float = 0.05
    max_length: Optional[int] = 256
    long_policy: str = "crop"
    mask_probability: float = 0.15
    label_column: Optional[str] = None  # fine-tuning: the label's column ("description" holds a FASTA header's)
    label_pattern: Optional[str] = None  # fine-tuning: a regex whose first group is the label within that column
    batch_size: int = 16
    packing: bool = False
    num_workers: int = 0
    cache_dir: str = ".cache/biotf/tokens"
    invalid_smiles: str = "error"

    def __post_init__(self) -> None:
        check_choice("data.long_policy", self.long_policy, TRAINING_LONG_POLICIES)
        check_choice("data.invalid_smiles", self.invalid_smiles, INVALID_SMILES)
        if not 0.0 < self.validation_fraction < 1.0:
            raise ConfigError("data.validation_fraction", self.validation_fraction, "0 < fraction < 1",
                              reason="training reports validation loss, so the split needs records on both sides")
        if not 0.0 < self.mask_probability < 1.0:
            raise ConfigError("data.mask_probability", self.mask_probability, "0 < probability < 1")
        check_int("data.max_length", self.max_length, 2, optional=True)
        check_int("data.batch_size", self.batch_size)
        check_int("data.num_workers", self.num_workers, 0)
        if not isinstance(self.packing, bool):
            raise ConfigError("data.packing", self.packing, "true | false")


OPTIMIZERS = ("adamw", "muon")


@dataclass
class OptimConfig:
    """AdamW, or Muon for the blocks' weight matrices with AdamW for the rest (`optimizer: muon`,
    `biotf.training.optim`), with linear warmup then cosine decay to `min_lr_ratio * lr` at `trainer.max_steps`."""

    optimizer: str = "adamw"
    lr: float = 1e-3
    weight_decay: float = 0.01
    betas: list[float] = field(default_factory=lambda: [0.9, 0.98])
    eps: float = 1e-8
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1

    def __post_init__(self) -> None:
        check_choice("optim.optimizer", self.optimizer, OPTIMIZERS)
        if not self.lr > 0:
            raise ConfigError("optim.lr", self.lr, "a number > 0")
        if self.weight_decay < 0:
            raise ConfigError("optim.weight_decay", self.weight_decay, "a number >= 0")
        if len(self.betas) != 2 or not all(0 <= b < 1 for b in self.betas):
            raise ConfigError("optim.betas", list(self.betas), "two numbers in [0, 1)")
        check_int("optim.warmup_steps", self.warmup_steps, 0)
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ConfigError("optim.min_lr_ratio", self.min_lr_ratio, "0 <= ratio <= 1")


@dataclass
class TrainerConfig:
    """Lightning Trainer settings; counts are optimizer steps unless named otherwise.

    devices: a count, a list of device indices or "auto". val_check_interval: training batches
    between validations. checkpoints/last.ckpt is written every `checkpoint_every_n_steps` optimizer
    steps and every `checkpoint_every_minutes` of training wall time, whichever comes first, after the
    first validation, at the end, and on SIGTERM. limit_val_batches: validation batches per check (a count, or a fraction).
    nonfinite: a NaN/inf training loss "stop"s the run (an error naming the step; checkpoints/last.ckpt
    keeps the last good weights) or is "skip"ped (no update from that batch, counted in
    train/nonfinite_skipped and the run summary).
    progress: how progress shows while `enable_progress_bar`: a tqdm "bar", plain "lines" (for logs and pipes), or
    "auto", a bar when stdout is a terminal and lines otherwise (`biotf.training.fit_progress`).
    validity_samples: a causal SMILES run ends by drawing this many molecules (as `biotf generate --num-samples`
    does, seed `seed`) and reporting the share RDKit parses in its summary (`biotf.inference.validity`); 0: none.
    """

    accelerator: str = "auto"
    devices: Any = 1
    num_nodes: int = 1
    strategy: str = "auto"
    precision: str = "32"
    max_steps: int = 1000
    val_check_interval: int = 200
    limit_val_batches: Any = 1.0
    accumulate_grad_batches: int = 1
    gradient_clip_val: float = 1.0
    checkpoint_every_n_steps: int = 100
    checkpoint_every_minutes: float = 1.0
    log_every_n_steps: int = 10
    compile: bool = False
    logger: str = "csv"
    enable_progress_bar: bool = True
    progress: str = "auto"
    nonfinite: str = "stop"
    gradient_checkpointing: bool = False  # recompute each block in backward (`Transformer.gradient_checkpointing`)
    fused_loss: bool = True  # the LM head and its loss in row chunks, no logits (`biotf.model.loss`)
    validity_samples: int = 0

    def __post_init__(self) -> None:
        check_choice("trainer.accelerator", self.accelerator, ACCELERATORS)
        check_choice("trainer.nonfinite", self.nonfinite, NONFINITE_POLICIES)
        check_choice("trainer.strategy", self.strategy, STRATEGIES)
        check_choice("trainer.precision", self.precision, PRECISIONS)
        check_choice("trainer.logger", self.logger, LOGGERS)
        check_choice("trainer.progress", self.progress, PROGRESS_FORMS)
        if self.logger == "tensorboard" and not any(importlib.util.find_spec(m) for m in ("tensorboard", "tensorboardX")):
            raise ConfigError("trainer.logger", self.logger, "csv, or tensorboard once installed",
                              reason="the tensorboard package is not installed (pip install 'biotf[tensorboard]')")
        for key in ("num_nodes", "max_steps", "val_check_interval", "accumulate_grad_batches",
                    "checkpoint_every_n_steps", "log_every_n_steps"):
            check_int(f"trainer.{key}", getattr(self, key))
        check_int("trainer.validity_samples", self.validity_samples, 0)
        limit = self.limit_val_batches
        if not ((isinstance(limit, int) and not isinstance(limit, bool) and limit >= 1)
                or (isinstance(limit, float) and 0.0 < limit <= 1.0)):
            raise ConfigError("trainer.limit_val_batches", limit, "a fraction in (0.0, 1.0] or a batch count >= 1")
        if self.gradient_clip_val < 0:
            raise ConfigError("trainer.gradient_clip_val", self.gradient_clip_val, "a number >= 0")
        if not self.checkpoint_every_minutes > 0:
            raise ConfigError("trainer.checkpoint_every_minutes", self.checkpoint_every_minutes, "a number > 0")
        devices = self.devices
        if not (devices == "auto" or (isinstance(devices, int) and devices >= 1)
                or (isinstance(devices, list) and devices and all(isinstance(d, int) for d in devices))):
            raise ConfigError("trainer.devices", devices, "an integer >= 1, a list of device indices, or auto")


@dataclass
class TrainConfig:
    """One training run. `tokenizer` is the mapping `biotf.tokenizers.build_tokenizer` takes (kind + options).

    ckpt_path: resume from this Lightning checkpoint (optimizer, schedule, step and data position).
    task / init_from / finetune: set `task` to fine-tune the model `init_from` names on labelled data
    (`biotf.finetune.finetune_run`); null trains a language model.
    """

    experiment: str = MISSING
    seed: int = 0
    ckpt_path: Optional[str] = None
    tokenizer: dict[str, Any] = field(default_factory=dict)
    model: TransformerConfig = MISSING  # from conf/model/<preset>.yaml; vocab_size is set from the tokenizer
    data: DataConfig = field(default_factory=DataConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    task: Optional[str] = None
    init_from: Optional[str] = None
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)

    @property
    def objective(self) -> str:
        """mlm for a bidirectional model, clm for a causal one: the model's `causal` flag decides."""
        return "clm" if self.model.causal else "mlm"


def register_configs() -> None:
    """Register the schema with Hydra's ConfigStore and the `${biotf_samples:}` resolver, the directory of the
    shipped data samples that `conf/data/*.yaml` train on (idempotent)."""
    ConfigStore.instance().store(name="train_schema", node=TrainConfig)
    if not OmegaConf.has_resolver("biotf_samples"):
        OmegaConf.register_new_resolver("biotf_samples", lambda: str(SAMPLES_DIR))


def _section(cfg: DictConfig, name: str) -> Any:
    """Convert one node to its dataclass, naming keys as `<section>.<field>` in errors."""
    try:
        return OmegaConf.to_object(cfg[name])
    except ConfigError as error:
        if error.key.startswith(f"{name}."):
            raise
        raise ConfigError(f"{name}.{error.key}", error.value, error.allowed, error.reason) from None


def _schema_fields(schema: type) -> dict[str, Any]:
    """A config dataclass's fields and their types (class constants such as CHOICES are not keys)."""
    hints = typing.get_type_hints(schema)
    return {f.name: hints[f.name] for f in dataclasses.fields(schema)}


def _not_a_key(name: str, value: Any, fields: dict[str, Any]) -> ConfigError:
    key = name.rpartition(".")[2]
    close = difflib.get_close_matches(key, list(fields), n=1)
    hint = f"; did you mean `{close[0]}`?" if close else ""
    return ConfigError(name, value, ", ".join(fields), reason=f"not a config key{hint}")


def check_key(key: str, value: Any) -> None:
    """ConfigError for a dotted override key the schema lacks, naming the closest key and the allowed ones
    (Hydra's own message suggests `+key`, which the schema then refuses too)."""
    schema, prefix = TrainConfig, ""
    for part in key.split("."):
        fields = _schema_fields(schema)
        if part not in fields:
            raise _not_a_key(f"{prefix}{part}", value, fields)
        schema, prefix = fields[part], f"{prefix}{part}."
        if not dataclasses.is_dataclass(schema):
            return  # free-form below here (the tokenizer mapping) or a plain value


def check_keys(values: dict[str, Any], schema: type, prefix: str = "") -> None:
    """ConfigError for a key `schema` lacks. Hydra refuses unknown keys in overrides, but `+key=value`
    appends one past that check, and the dataclass conversion would then drop it silently (a typo such
    as `+trainer.max_step=10`, or a `_target_` that suggests something gets instantiated)."""
    fields = _schema_fields(schema)
    for key, value in values.items():
        name = f"{prefix}{key}"
        if key not in fields:
            raise _not_a_key(name, value, fields)
        if dataclasses.is_dataclass(fields[key]) and isinstance(value, dict):
            check_keys(value, fields[key], f"{name}.")


def check_strategy(trainer: TrainerConfig, optim: OptimConfig) -> None:
    """Refuse trainer.strategy=fsdp where it cannot run, naming why: NCCL needs CUDA GPUs (on CPUs FSDP2 runs
    over gloo, with trainer.accelerator=auto or cpu), and Muon orthogonalises whole weight matrices, which FSDP2
    splits across ranks."""
    if trainer.strategy != "fsdp":
        return
    if trainer.accelerator in ("gpu", "cuda"):
        import torch  # a CUDA query; composing a config needs no torch otherwise

        if not torch.cuda.is_available():
            raise ConfigError("trainer.accelerator", trainer.accelerator, "auto | cpu",
                              reason="trainer.strategy=fsdp on GPUs needs CUDA (NCCL), and this machine has no CUDA "
                                     "GPU; on CPUs FSDP2 shards over gloo")
    if trainer.accelerator == "mps":
        raise ConfigError("trainer.accelerator", trainer.accelerator, "auto | cpu | gpu",
                          reason="trainer.strategy=fsdp shards over gloo (CPU) or NCCL (CUDA), not MPS")
    if optim.optimizer != "adamw":
        raise ConfigError("optim.optimizer", optim.optimizer, "adamw",
                          reason="trainer.strategy=fsdp splits each weight matrix across ranks, and Muon "
                                 "orthogonalises whole matrices")


def validate(cfg: DictConfig) -> TrainConfig:
    """The composed config as validated dataclasses; raises ConfigError/InputError before any data is read."""
    values = OmegaConf.to_container(cfg, resolve=False)
    values.pop("hydra", None)  # present when composed with the Hydra config (entry.preflight), not ours
    check_keys(values, TrainConfig)
    sections = {name: _section(cfg, name) for name in ("model", "data", "trainer", "optim", "finetune")}
    tokenizer = OmegaConf.to_container(cfg.tokenizer, resolve=True)
    check_tokenizer_config(tokenizer)
    config = TrainConfig(experiment=cfg.experiment, seed=cfg.seed, ckpt_path=cfg.ckpt_path, tokenizer=tokenizer,
                         task=cfg.task, init_from=cfg.init_from, **sections)
    if not 0 <= config.seed < 2**32:
        raise ConfigError("seed", config.seed, "an integer from 0 to 4294967295")
    check_strategy(config.trainer, config.optim)
    check_finetune(config.task, config.init_from, config.data.label_column, config.finetune, config.trainer.nonfinite)
    model, data = config.model, config.data
    # A fine-tuning run's model is init_from's, checked when it is loaded (`finetune.check_against_model`).
    if config.task is None and data.max_length is None:
        raise ConfigError("data.max_length", None, "an integer >= 2",
                          reason="null (the model's max_seq_len) is for fine-tuning runs")
    if config.task is None and model.max_seq_len is not None and data.max_length > model.max_seq_len:
        raise ConfigError("data.max_length", data.max_length, f"<= model.max_seq_len={model.max_seq_len}")
    if config.trainer.validity_samples and not (config.task is None and model.causal
                                                 and tokenizer.get("kind") == "smiles"):
        raise ConfigError("trainer.validity_samples", config.trainer.validity_samples, "0 for this run",
                          reason="it samples SMILES, so it needs a language-model run (no task) of a causal model "
                                 "with the smiles tokenizer")
    path = Path(data.path)
    if not path.is_file():
        raise InputError(f"data.path: input file {path} does not exist" if not path.exists()
                         else f"data.path: {path} is not a file")
    from biotf.checkpoint.sharded_checkpoint import is_sharded  # imports torch, which composing a config needs not

    if config.ckpt_path is not None and not (Path(config.ckpt_path).is_file() or is_sharded(config.ckpt_path)):
        raise ConfigError("ckpt_path", config.ckpt_path, "an existing checkpoint file (e.g. "
                          "<run>/checkpoints/last.ckpt) or the sharded checkpoint directory of an FSDP run")
    return config


def describe(error: Exception) -> str:
    """One line for a configuration error, naming the key and the allowed values where Hydra knows them."""
    if isinstance(error, MissingConfigException) and error.options is not None and error.missing_cfg_file:
        group, _, name = error.missing_cfg_file.rpartition("/")
        return f"invalid config {group}={name!r}: no such option (allowed: {', '.join(sorted(error.options))})"
    parts = [str(error)]
    if error.__cause__ is not None and str(error.__cause__) not in parts[0]:
        parts.append(str(error.__cause__))
    lines = [line.strip() for part in parts for line in part.splitlines() if line.strip()]
    key, equals, value = error.override.partition("=") if isinstance(error, OverrideParseException) else ("", "", "")
    if equals and "'" not in value:  # e.g. a regex: Hydra reads ( ) [ ] { } , as override syntax
        lines.append(f"quote the value for Hydra, inside shell quotes: \"{key}='{value}'\"")
    return "; ".join(lines)


def to_plain(config: TrainConfig) -> dict[str, Any]:
    """The validated config as plain, YAML/JSON-clean values (for the run directory and checkpoints)."""
    return dataclasses.asdict(config)
