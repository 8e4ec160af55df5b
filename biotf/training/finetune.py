"""One fine-tuning run (`python train.py experiment=finetune task=... init_from=... data.label_column=...`).

    load_pretrained(init_from) -> labelled records (`labelled`) -> leakage-aware train / validation / test split
      (finetune.split; split.tsv) -> TaskModel (`task_module`: trunk frozen, full or LoRA) -> fit with early
      stopping on validation -> best checkpoint -> validation and test metrics (`finetune_results`: finetune.json,
      predictions_test.tsv) -> <run>/model: exported with its head (`biotf.inference.task`) for `biotf predict`.

The run directory, last.ckpt (by steps, by wall time, at the end, on SIGTERM: exit 143 with the resume command)
and `ckpt_path=<run>/checkpoints/last.ckpt` resumes are a language-model run's (`run.build_trainer`, `run.held_run`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch

from biotf.checkpoint import CHECKPOINT_DIR, read_checkpoint
from biotf.data.splits import assign, split_groups
from biotf.errors import InputError
from biotf.inference.loading import load_pretrained
from biotf.inference.task import ADAPTER_FILE, MODEL_DIR, TaskInfo, save_task_model
from biotf.model.lora import merge_lora, save_adapter
from biotf.model.tasks import TaskModel
from biotf.tokenizers.base import Tokenizer
from biotf.training.callbacks import RunControl
from biotf.training.config import TrainConfig, to_plain
from biotf.training.finetune_results import (PREDICTIONS_FILE, SPLIT_FILE, FinetuneSummary, check_same_split,
                                             write_predictions, write_split)
from biotf.training.hints import command_line, reader_words
from biotf.training.labelled import read_labelled
from biotf.training.metrics import LOWER_IS_BETTER
from biotf.training.run import build_trainer, continue_metrics, held_run, write_run_files
from biotf.training.rundir import RunDirectoryError, checkpoint_run_dir
from biotf.training.task_data import TaskCollator, task_loader
from biotf.training.task_module import TaskModule, build_task_model, evaluate


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
    origin = checkpoint_run_dir(config.ckpt_path) if config.ckpt_path is not None else None
    if origin is not None:  # a resume trains on the split its run began with (a loose .ckpt has no split.tsv)
        check_same_split(origin / SPLIT_FILE, data.ids, sides)
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
    loaders = {name: task_loader(data, rows[name], collate, config.data.batch_size,
                                 trainer if name == "train" else None, config.seed) for name in rows}
    module = TaskModule(model, config, config.trainer.max_steps, n_outputs, control)
    # weights_only: a resumed checkpoint is read without unpickling code (biotf checkpoints hold plain values).
    trainer.fit(module, train_dataloaders=loaders["train"], val_dataloaders=loaders["validation"],
                ckpt_path=config.ckpt_path, weights_only=True)
    train_seconds = module.training_time.seconds()

    best = trainer.checkpoint_callback.best_model_path or str(run_dir / CHECKPOINT_DIR / "last.ckpt")
    if Path(best).is_file():
        module.load_state_dict(read_checkpoint(best)["state_dict"])  # its CRC-32 checked
    results = {name: evaluate(module, loaders[name]) for name in ("validation", "test")}
    write_predictions(run_dir / PREDICTIONS_FILE, data, rows["test"], results["test"][1], config.task)
    _export(module.model, tokenizer, config, data.classes, run_dir, run_config)

    summary = FinetuneSummary(
        experiment=config.experiment, task=config.task, mode=config.finetune.mode, init_from=str(config.init_from),
        parameters=sum(p.numel() for p in module.model.parameters()), trainable_parameters=trainable,
        steps=trainer.global_step, train_seconds=train_seconds,
        split={"method": split.method, "groups": int(len(np.unique(groups))),
               "records": {k: int(len(v)) for k, v in rows.items()}, "seed": config.seed},
        dropped=data.dropped, cropped=data.cropped, best_checkpoint=best,
        validation=results["validation"][0], test=results["test"][0], classes=data.classes)
    summary.write(run_dir)
    print(summary.text())
    print("predict with it: " + command_line("biotf", "predict", "--model", run_dir, "--input", config.data.path,
                                             *reader_words(config.data.column, config.data.id_column),
                                             "--output", run_dir / "predictions.tsv"))
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
