"""One fine-tuning run (`python train.py experiment=finetune task=... init_from=... data.label_column=...`).

    load_pretrained(init_from) -> labelled records (labels from data.label_column [~ data.label_pattern])
      -> leakage-aware train / validation / test split (finetune.split; written to split.tsv)
      -> TaskModel (trunk + head; trunk frozen, full or LoRA) -> Lightning fit with early stopping on
         validation -> best checkpoint -> validation and test metrics (finetune.json, predictions_test.tsv)
      -> <run>/model: exported like any model, plus the head (`biotf.inference.task`); `biotf predict` reads it.

The run directory, last.ckpt (by steps, by wall time, at the end, on SIGTERM: exit 143 with the resume command)
and `ckpt_path=<run>/checkpoints/last.ckpt` resumes are a language-model run's (`run.build_trainer`, `run.held_run`).

Records are never dropped silently: unlabelled records and records over max_length (data.long_policy=drop) are
counted in finetune.json and the printed summary. Labels: classification takes the distinct values as class names
(sorted); regression parses numbers; token takes one label character per residue, so it needs a tokenizer with
one token per residue (character-level protein / DNA), which is checked record by record.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader

from biotf.checkpoint import atomic_write_text, read_checkpoint
from biotf.data import LengthGroupedBatchSampler, ReaderOptions, read_records
from biotf.data.splits import assign, split_groups
from biotf.errors import InputError
from biotf.inference.loading import CHECKPOINT_DIR, load_pretrained
from biotf.inference.task import (ADAPTER_FILE, MODEL_DIR, TaskInfo, content_mask, encode_for_task,
                                  save_task_model)
from biotf.model.loss import IGNORE_INDEX
from biotf.model.lora import apply_lora, merge_lora, save_adapter
from biotf.model.tasks import TaskModel
from biotf.tokenizers.base import Tokenizer
from biotf.training.callbacks import RunControl, agree_on_requests, restore_rng_state, save_rng_state
from biotf.training.config import TrainConfig, to_plain
from biotf.training.metrics import LOWER_IS_BETTER, task_metrics
from biotf.training.optim import WarmupCosine, parameter_groups
from biotf.training.datamodule import ResumableDataLoader
from biotf.training.rundir import RunDirectoryError
from biotf.training.run import build_trainer, continue_metrics, held_run, write_run_files

SPLIT_FILE = "split.tsv"
RESULT_FILE = "finetune.json"


@dataclass
class LabelledSet:
    """Encoded labelled records: `labels[i]` is a class id, a float, or an array over `ids[i]` (token task)."""

    ids: list[str]
    sequences: list[str]
    token_ids: list[np.ndarray]
    labels: list[Any]
    groups: list[str] | None
    classes: list[str] | None
    dropped: Counter


def _label_values(config: TrainConfig) -> tuple[list, list[str], list[str | None]]:
    """(records, raw labels, group names) of the input, labels parsed with data.label_pattern."""
    from biotf.analysis.labels import parse_labels

    data = config.data
    records = list(read_records(data.path, ReaderOptions(format=data.format, column=data.column,
                                                         id_column=data.id_column)))
    if not records:
        raise InputError(f"data.path: {data.path} holds no records")
    column, group_column = data.label_column, config.finetune.split.group_column
    for key, name in (("data.label_column", column), ("finetune.split.group_column", group_column)):
        if name is not None and name != "id" and name not in records[0].metadata:
            raise InputError(f"{key}: column {name!r} not found in {data.path} "
                             f"(columns: {', '.join(['id', *records[0].metadata])})")
    raw = np.array([r.id if column == "id" else r.metadata.get(column, "") for r in records], dtype=str)
    raw = parse_labels([r.id for r in records], raw, data.label_pattern, column, key="data.label_pattern")
    groups = [r.metadata.get(group_column) if group_column else None for r in records]
    return records, [str(v).strip() for v in raw], groups


def read_labelled(config: TrainConfig, tokenizer: Tokenizer) -> LabelledSet:
    """Every labelled record, encoded, with its label in the task's form (see the module docstring)."""
    task, data = config.task, config.data
    records, raw, groups = _label_values(config)
    dropped: Counter = Counter()
    classes = None
    if task == "classification":
        classes = sorted({v for v in raw if v})
        if len(classes) < 2:
            raise InputError(f"data.label_column {data.label_column!r}: {len(classes)} distinct label(s); "
                             "classification needs at least 2")
    elif task == "token":
        classes = sorted({c for v in raw for c in v})
    index = {name: i for i, name in enumerate(classes or [])}
    kept = LabelledSet([], [], [], [], [] if config.finetune.split.method == "group" else None, classes, dropped)
    for record, value, group in zip(records, raw, groups):
        if not value:
            dropped["unlabelled"] += 1
            continue
        if config.finetune.split.method == "group" and not group:
            raise InputError(f"record {record.id!r}: no value in group column {config.finetune.split.group_column!r}")
        ids = encode_for_task(tokenizer, record.sequence, record.id, data.max_length, data.long_policy, dropped)
        if ids is None:
            continue
        if task == "classification":
            label: Any = index[value]
        elif task == "regression":
            try:
                label = float(value)
            except ValueError:
                raise InputError(f"record {record.id!r}: label {value!r} is not a number (task=regression)") from None
        else:
            label = _token_labels(record.id, record.sequence, value, ids, tokenizer, index, data.max_length)
        kept.ids.append(record.id)
        kept.sequences.append(record.sequence)
        kept.token_ids.append(ids)
        kept.labels.append(label)
        if kept.groups is not None:
            kept.groups.append(group)
    if task == "regression" and len(set(kept.labels)) < 2:
        raise InputError("task=regression: the labels do not vary")
    return kept


def _token_labels(record: str, sequence: str, value: str, ids: np.ndarray, tokenizer: Tokenizer,
                  index: dict[str, int], max_length: int) -> np.ndarray:
    """Per-token class ids over `ids` (-100 on special tokens) from one label character per residue."""
    if len(value) != len(sequence):
        raise InputError(f"record {record!r}: {len(value)} token labels for a sequence of {len(sequence)} residues "
                         "(task=token needs one label character per residue)")
    content = np.flatnonzero(~np.isin(ids, list(tokenizer.special_ids)))
    whole = len(tokenizer.encode(sequence, add_special_tokens=False, record=record))
    if whole != len(sequence):
        raise InputError(f"record {record!r}: the {tokenizer.kind} tokenizer makes {whole} tokens of {len(sequence)} "
                         "residues; task=token needs one token per residue (a character-level tokenizer)")
    labels = np.full(len(ids), IGNORE_INDEX, np.int64)
    labels[content] = [index[c] for c in value[:len(content)]]  # a cut record keeps its first residues' labels
    return labels


class LabelledDataset(torch.utils.data.Dataset):
    def __init__(self, data: LabelledSet, rows: np.ndarray):
        self.data, self.rows = data, rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, item: int) -> int:
        return int(self.rows[item])


class TaskCollator:
    """Row indices -> padded input_ids, attention_mask, content_mask and labels (class ids, values or per token)."""

    def __init__(self, data: LabelledSet, tokenizer: Tokenizer, task: str):
        self.data, self.tokenizer, self.task = data, tokenizer, task

    def __call__(self, rows: list[int]) -> dict[str, torch.Tensor]:
        from biotf.data.collators import pad_batch

        ids, attention = (torch.from_numpy(a) for a in pad_batch([self.data.token_ids[r] for r in rows],
                                                                  self.tokenizer.pad_id))
        labels = [self.data.labels[r] for r in rows]
        if self.task == "token":
            target = torch.full(ids.shape, IGNORE_INDEX, dtype=torch.long)
            for row, label in enumerate(labels):
                target[row, :len(label)] = torch.from_numpy(label)
        elif self.task == "regression":
            target = torch.tensor(labels, dtype=torch.float32)[:, None]
        else:
            target = torch.tensor(labels, dtype=torch.long)
        return {"input_ids": ids, "attention_mask": attention,
                "content_mask": content_mask(ids, attention, self.tokenizer), "labels": target,
                "rows": torch.tensor(rows)}


class TaskModule(L.LightningModule):
    """Trains a `TaskModel`; validation computes the task's metrics over the whole split (`metrics.py`)."""

    def __init__(self, model: TaskModel, config: TrainConfig, total_steps: int, n_classes: int,
                 control: RunControl | None = None):
        super().__init__()
        self.model, self.config, self.total_steps, self.n_classes = model, config, total_steps, n_classes
        self.control = control
        self._outputs: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        if self.config.finetune.mode == "frozen":
            self.model.trunk.eval()  # a frozen trunk computes the features of inference (no dropout)
        agree_on_requests(self, self.control)  # SIGTERM and the wall-time clock, as in a language-model run
        out = self.model(batch["input_ids"], batch["attention_mask"], batch["content_mask"], batch["labels"])
        self.log("train/loss", out.loss.detach(), prog_bar=True, batch_size=len(batch["input_ids"]))
        self.log("train/lr", self.optimizers().param_groups[0]["lr"], batch_size=len(batch["input_ids"]))
        return out.loss

    def on_validation_epoch_start(self) -> None:
        self._outputs = []

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        out = self.model(batch["input_ids"], batch["attention_mask"], batch["content_mask"], batch["labels"])
        weight = (batch["labels"] != IGNORE_INDEX).sum() if self.model.task == "token" else len(batch["labels"])
        self._outputs.append((out.loss.detach() * weight, torch.as_tensor(weight), out.predictions, batch["labels"]))

    def on_validation_epoch_end(self) -> None:
        for name, value in self.collected_metrics().items():
            self.log(f"val/{name}", value, prog_bar=name == "loss")

    def collected_metrics(self) -> dict[str, float]:
        """Loss (weighted by labelled items) and task metrics over everything since the epoch started."""
        loss = float(sum(o[0] for o in self._outputs) / max(float(sum(o[1] for o in self._outputs)), 1.0))
        truth, predicted = self._flat([o[3] for o in self._outputs]), self._flat([o[2] for o in self._outputs])
        if self.model.task == "token":
            labelled = truth != IGNORE_INDEX
            truth, predicted = truth[labelled], predicted[labelled]
        return {"loss": loss, **task_metrics(self.model.task, truth, predicted, self.n_classes)}

    def _flat(self, tensors: list[torch.Tensor]) -> np.ndarray:
        if self.model.task == "token":  # batches differ in width
            return np.concatenate([t.cpu().numpy().ravel() for t in tensors])
        return torch.cat([t.cpu() for t in tensors]).numpy()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        save_rng_state(checkpoint)  # head and trunk dropout after a resume repeat the uninterrupted run

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        restore_rng_state(checkpoint)

    def configure_optimizers(self) -> dict[str, Any]:
        """AdamW: the head at optim.lr, the trunk's trainable weights (all, or LoRA's) at finetune.trunk_lr."""
        optim, trunk_lr = self.config.optim, self.config.finetune.trunk_lr or self.config.optim.lr
        groups = [dict(g, lr=optim.lr) for g in parameter_groups(self.model.head, optim.weight_decay)]
        groups += [dict(g, lr=trunk_lr) for g in parameter_groups(self.model.trunk, optim.weight_decay)]
        optimizer = torch.optim.AdamW([g for g in groups if g["params"]], betas=tuple(optim.betas), eps=optim.eps)
        schedule = WarmupCosine(optim.warmup_steps, self.total_steps, optim.min_lr_ratio)
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.LambdaLR(optimizer, schedule),
                                 "interval": "step"}}


def build_task_model(config: TrainConfig, trunk, n_outputs: int) -> tuple[TaskModel, int]:
    """The TaskModel in the configured mode; returns it and its trainable parameter count."""
    finetune = config.finetune
    trunk.train()
    trunk.gradient_checkpointing = config.trainer.gradient_checkpointing
    model = TaskModel(trunk, config.task, n_outputs, pool=finetune.pool, dropout=finetune.head_dropout)
    if finetune.mode == "frozen":
        for parameter in trunk.parameters():
            parameter.requires_grad_(False)
    elif finetune.mode == "lora":
        lora = finetune.lora
        apply_lora(trunk, list(lora.targets), lora.rank, lora.alpha, lora.dropout)
    return model, sum(p.numel() for p in model.parameters() if p.requires_grad)


def _loader(data: LabelledSet, rows: np.ndarray, collate: TaskCollator, batch_size: int, trainer: L.Trainer | None,
            seed: int) -> DataLoader:
    """The training loader (`trainer` given): shuffled batches that are a function of (seed, epoch) and that a resume
    continues mid-epoch, as a language-model run's (`ResumableDataLoader`); otherwise the rows in order."""
    generator = torch.Generator().manual_seed(seed)
    dataset = LabelledDataset(data, rows)
    if trainer is None:
        return DataLoader(dataset, batch_size=batch_size, shuffle=False, collate_fn=collate, generator=generator)
    # group_batches=1: plain random batches (no length grouping), each sorted by length.
    sampler = LengthGroupedBatchSampler(np.array([len(data.token_ids[r]) for r in rows]), batch_size, shuffle=True,
                                        seed=seed, group_batches=1)
    return ResumableDataLoader(dataset, batch_sampler=sampler, collate_fn=collate, generator=generator,
                               epoch_fn=lambda: trainer.current_epoch)


def evaluate(module: TaskModule, loader: DataLoader) -> tuple[dict[str, float], list[np.ndarray]]:
    """(metrics, one prediction per record in loader order) of the module's current weights on one split."""
    module.eval()
    module.on_validation_epoch_start()
    with torch.no_grad():
        for batch in loader:
            module.validation_step(batch, 0)
    predictions = [p for output in module._outputs for p in output[2].cpu().numpy()]
    return module.collected_metrics(), predictions


def _label_text(value: Any, classes: list[str] | None, task: str) -> str:
    if task == "regression":
        return f"{float(np.ravel(value)[0]):.6g}"
    if task == "token":
        return "".join(classes[int(v)] for v in np.ravel(value) if int(v) != IGNORE_INDEX)
    return classes[int(value)]


def write_predictions(path: Path, data: LabelledSet, rows: np.ndarray, predictions: list[np.ndarray], task: str) -> None:
    lines = ["id\tlabel\tprediction"]
    for row, predicted in zip(rows, predictions):
        if task == "token":  # predictions over the padded width: keep the labelled (content) positions
            predicted = np.where(data.labels[row] != IGNORE_INDEX, np.ravel(predicted)[:len(data.labels[row])],
                                 IGNORE_INDEX)
        lines.append(f"{data.ids[row]}\t{_label_text(data.labels[row], data.classes, task)}\t"
                     f"{_label_text(predicted, data.classes, task)}")
    atomic_write_text(path, "\n".join(lines) + "\n")


def write_split(path: Path, ids: list[str], sides: np.ndarray, groups: np.ndarray) -> None:
    """split.tsv: each labelled record's side (train / validation / test) and the group that kept it there."""
    atomic_write_text(path, "id\tsplit\tgroup\n" + "".join(f"{i}\t{s}\t{g}\n" for i, s, g in zip(ids, sides, groups)))


@dataclass
class FinetuneSummary:
    experiment: str
    task: str
    mode: str
    init_from: str
    parameters: int
    trainable_parameters: int
    steps: int
    train_seconds: float
    split: dict[str, Any]
    dropped: dict[str, int]
    best_checkpoint: str
    validation: dict[str, float]
    test: dict[str, float]
    classes: list[str] | None

    @property
    def final_val_loss(self) -> float:  # what a Hydra sweeper minimises, as for language-model runs
        return self.validation["loss"]

    def text(self) -> str:
        def row(metrics: dict[str, float]) -> str:
            return ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())

        sizes = ", ".join(f"{k} {v}" for k, v in self.split["records"].items())
        lines = [f"biotf fine-tuning summary: {self.experiment} (task {self.task}, mode {self.mode}, "
                 f"{self.trainable_parameters:,} of {self.parameters:,} parameters trained)",
                 f"  from {self.init_from}; {self.steps} steps, {self.train_seconds:.0f} s",
                 f"  split {self.split['method']}: {sizes} records in {self.split['groups']} groups",
                 f"  best checkpoint, validation: {row(self.validation)}",
                 f"  best checkpoint, test:       {row(self.test)}"]
        if self.dropped:
            lines.append("  left out: " + ", ".join(f"{n} {why}" for why, n in self.dropped.items()))
        return "\n".join(lines)

    def write(self, run_dir: Path) -> None:
        atomic_write_text(run_dir / RESULT_FILE, json.dumps(dataclasses.asdict(self), indent=2) + "\n")


def train_task(config: TrainConfig, run_dir: str | Path) -> FinetuneSummary:
    """Fine-tune as `config` says, writing everything into `run_dir` (see the module docstring), which this process
    holds while it trains (`held_run`, as a language-model run). Raises `RunInterrupted` after saving last.ckpt
    when SIGTERM arrives during training; `ckpt_path` resumes from it."""
    run_dir = Path(run_dir)
    with held_run(config, run_dir) as control:
        return _train_task(config, run_dir, control)


def _train_task(config: TrainConfig, run_dir: Path, control: RunControl) -> FinetuneSummary:
    L.seed_everything(config.seed, workers=True, verbose=False)
    # Read (and checked against its CRC-32) before any data work: a damaged checkpoint fails in seconds.
    resumed = read_checkpoint(config.ckpt_path) if config.ckpt_path is not None else None
    if (run_dir / MODEL_DIR).exists():
        raise RunDirectoryError(f"run directory {run_dir} already holds a finished fine-tuning run ({MODEL_DIR}/); "
                                "choose a new hydra.run.dir")
    trunk, tokenizer = load_pretrained(config.init_from)
    if trunk.config.max_seq_len is not None and config.data.max_length > trunk.config.max_seq_len:
        raise InputError(f"data.max_length={config.data.max_length} exceeds the max_seq_len "
                         f"{trunk.config.max_seq_len} of {config.init_from}")
    if tokenizer.pad_id is None:
        raise InputError(f"the tokenizer of {config.init_from} has no pad token; batches need one")
    data = read_labelled(config, tokenizer)
    split = config.finetune.split
    groups = split_groups(split.method, data.sequences, data.ids, data.groups, split.identity, split.kmer)
    sides = assign(groups, split.validation, split.test, config.seed)
    rows = {name: np.flatnonzero(sides == name) for name in ("train", "validation", "test")}
    write_split(run_dir / SPLIT_FILE, data.ids, sides, groups)

    n_outputs = 1 if config.task == "regression" else len(data.classes)
    model, trainable = build_task_model(config, trunk, n_outputs)
    if config.task == "regression":
        train_values = torch.tensor([data.labels[r] for r in rows["train"]], dtype=torch.float32)
        model.set_target_scale(train_values.mean()[None], train_values.std()[None])
    run_config = to_plain(dataclasses.replace(config, model=trunk.config))
    run_config["tokenizer"] = tokenizer.to_config() if hasattr(tokenizer, "to_config") else run_config["tokenizer"]
    write_run_files(run_dir, run_config, tokenizer)

    monitor = config.finetune.monitor
    trainer = build_trainer(config.trainer, run_dir, control, monitor=f"val/{monitor}",
                            mode="min" if monitor in LOWER_IS_BETTER else "max", patience=config.finetune.patience,
                            distributed=False)
    continue_metrics(config, run_dir, resumed)
    del resumed
    collate = TaskCollator(data, tokenizer, config.task)
    loaders = {name: _loader(data, rows[name], collate, config.data.batch_size, trainer if name == "train" else None,
                             config.seed) for name in rows}
    module = TaskModule(model, config, config.trainer.max_steps, n_outputs, control)
    start = time.perf_counter()
    # weights_only: a resumed checkpoint is read without unpickling code (biotf checkpoints hold plain values).
    trainer.fit(module, train_dataloaders=loaders["train"], val_dataloaders=loaders["validation"],
                ckpt_path=config.ckpt_path, weights_only=True)
    train_seconds = time.perf_counter() - start

    best = trainer.checkpoint_callback.best_model_path or str(run_dir / CHECKPOINT_DIR / "last.ckpt")
    if Path(best).is_file():
        module.load_state_dict(read_checkpoint(best)["state_dict"])  # its CRC-32 checked
    results = {name: evaluate(module, loaders[name]) for name in ("validation", "test")}
    write_predictions(run_dir / "predictions_test.tsv", data, rows["test"], results["test"][1], config.task)
    _export(module.model, tokenizer, config, data.classes, run_dir, run_config)

    summary = FinetuneSummary(
        experiment=config.experiment, task=config.task, mode=config.finetune.mode, init_from=str(config.init_from),
        parameters=sum(p.numel() for p in module.model.parameters()), trainable_parameters=trainable,
        steps=trainer.global_step, train_seconds=train_seconds,
        split={"method": split.method, "groups": int(len(np.unique(groups))),
               "records": {k: int(len(v)) for k, v in rows.items()}, "seed": config.seed},
        dropped=dict(data.dropped), best_checkpoint=best,
        validation=results["validation"][0], test=results["test"][0], classes=data.classes)
    summary.write(run_dir)
    print(summary.text())
    reader = "".join(f" --{flag} '{value}'" for flag, value in (("column", config.data.column),
                                                              ("id-column", config.data.id_column)) if value)
    print(f"predict with it: biotf predict --model {run_dir} --input {config.data.path}{reader} "
          f"--output {run_dir / 'predictions.tsv'}")
    return summary


def _export(model: TaskModel, tokenizer: Tokenizer, config: TrainConfig, classes: list[str] | None, run_dir: Path,
            run_config: dict[str, Any]) -> None:
    """<run>/model: the trunk (LoRA merged) and the head; with LoRA also the adapter alone."""
    directory = run_dir / MODEL_DIR
    info = TaskInfo(config.task, classes, config.finetune.pool, config.data.max_length, config.data.long_policy,
                    config.data.label_column)
    adapter = None
    if config.finetune.mode == "lora":  # kept beside the merged weights: the adapter alone fits the unchanged base
        adapter = save_adapter(model.trunk, run_dir / f".{ADAPTER_FILE}.tmp")  # moved into the export's staging
        merge_lora(model.trunk)
    model.trunk.gradient_checkpointing = False
    save_task_model(model.eval(), tokenizer, info, directory, run_config, adapter=adapter)

