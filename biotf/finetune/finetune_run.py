"""One fine-tuning run (`python train.py experiment=finetune task=... init_from=... data.label_column=...`).

    load_source(init_from) -> labelled records (`labelled`) -> leakage-aware train / validation / test split
      (finetune.split; split.tsv) -> TaskModel (`module`, in its `modes` entry: full, frozen or LoRA) -> fit with early
      stopping on validation -> best checkpoint -> validation and test metrics (`results`: finetune.json,
      predictions_test.tsv) -> <run>/model: exported with its head (`biotf.checkpoint.task_model`) for `biotf predict`.

The run directory, last.ckpt (by steps, by wall time, at the end, on SIGTERM: exit 143 with the resume command)
and `ckpt_path=<run>/checkpoints/last.ckpt` resumes are a language-model run's (`run.build_trainer`, `run.held_run`),
a resume checked against the module before anything is written and, into another directory, keeping the run's best
checkpoint (`run.continue_run`). Settings that only make sense for some models are checked against init_from's as
soon as it is loaded, before any data is read (`check_against_model`).

With `trainer.strategy=ddp` or `fsdp` every rank trains on its own batches (`biotf.training.sharding` shards the
trunk's blocks, then the task module); rank 0 alone then scores and exports. An FSDP run's modules hold shards, so
rank 0 consolidates the checkpoints and reads the best one into init_from's model built again, unsharded: the export
is the one a one-device run writes.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch

from biotf.checkpoint import CHECKPOINT_DIR, read_checkpoint
from biotf.checkpoint.loading import load_source
from biotf.checkpoint.task_model import ADAPTER_FILE, MODEL_DIR, TaskInfo, save_task_model
from biotf.io.readers import detect_format
from biotf.data.splits import SPLIT_FILE, UNPLACED, assign, split_groups, write_split
from biotf.conventions import IGNORE_INDEX, counted
from biotf.errors import ConfigError, InputError
from biotf.model import Transformer
from biotf.model.stem import majority_bins
from biotf.model.heads import TaskModel, check_pool, check_resolution
from biotf.tokenizers.base import Tokenizer
from biotf.tokenizers.build import option_errors
from biotf.training.callbacks import RunControl
from biotf.training.train_config import TrainConfig, to_plain
from biotf.finetune.batches import FeatureCollator, TaskCollator, task_loader
from biotf.finetune.features import cached_features
from biotf.finetune.labelled import LabelledSet, read_labelled
from biotf.finetune.task_metrics import LOWER_IS_BETTER
from biotf.model.modes import Mode, build_mode
from biotf.finetune.task_module import TaskModule, build_task_model, evaluate
from biotf.finetune.results import PREDICTIONS_FILE, FinetuneSummary, check_same_split, write_predictions
from biotf.training.hints import data_command
from biotf.training.run import build_trainer, consolidate_run, continue_run, held_run, read_resumed, write_run_files
from biotf.training.sharding import ShardedStrategy
from biotf.training.rundir import checkpoint_run_dir

INVALID_SMILES_LEFT_OUT = "SMILES RDKit cannot parse (data.invalid_smiles=skip)"  # a reason records are left out


def train_task(config: TrainConfig, run_dir: str | Path) -> FinetuneSummary | None:
    """Fine-tune as `config` says, writing everything into `run_dir` (see the module docstring), which this process
    holds while it trains (`held_run`, as a language-model run). Raises `RunInterrupted` after saving last.ckpt
    when SIGTERM arrives during training; `ckpt_path` resumes from it. Returns the summary on rank 0 (the only
    process of a one-device run), None on the other ranks of a distributed one."""
    run_dir = Path(run_dir)
    with held_run(config, run_dir) as control:
        return _train_task(config, run_dir, control)


def check_against_model(config: TrainConfig, trunk: Transformer, tokenizer: Tokenizer, mode: Mode) -> int:
    """Refuse settings that init_from's model (or its tokenizer) cannot use, before any data is read; returns the
    max_length the run encodes records to: data.max_length, or the model's max_seq_len when that is null."""
    source, limit, finetune = config.init_from, trunk.config.max_seq_len, config.finetune
    max_length = config.data.max_length
    if max_length is None:
        if limit is None:
            raise ConfigError("data.max_length", None, "an integer >= 2",
                              reason=f"the model of {source} has no max_seq_len to default to")
        max_length = limit
    elif limit is not None and max_length > limit:
        raise InputError(f"data.max_length={max_length} exceeds the max_seq_len {limit} of {source} "
                         "(null: the model's own)")
    if tokenizer.pad_id is None:
        raise InputError(f"the tokenizer of {source} has no pad token; batches need one")
    check_pool(finetune.pool, config.task, trunk.config.causal)
    check_resolution(finetune.resolution, config.task, trunk.config.stem_factor)
    mode.check(trunk)
    if finetune.split.method == "identity" and (
            tokenizer.kind == "smiles" or detect_format(Path(config.data.path), config.data.format) == "smi"):
        raise ConfigError("finetune.split.method", "identity", "scaffold | group | random",
                          reason="sequence identity is for proteins and DNA; SMILES strings of one molecule differ "
                                 "and of unrelated ones look alike (scaffold groups molecules by ring system)")
    return max_length


def _train_task(config: TrainConfig, run_dir: Path, control: RunControl) -> FinetuneSummary | None:
    L.seed_everything(config.seed, workers=True, verbose=False)
    resumed = read_resumed(config)
    tokenizer_options = {key: value for key, value in config.finetune.tokenizer_options.items() if value is not None}
    with option_errors(tokenizer_options, "finetune.tokenizer_options.{}"):
        initial = load_source(config.init_from, tokenizer_options=tokenizer_options)
    trunk, tokenizer = initial.network, initial.tokenizer
    mode = build_mode(config.finetune.mode, config.finetune.lora)
    max_length = check_against_model(config, trunk, tokenizer, mode)
    data = read_labelled(config, tokenizer, max_length)
    bin_labels = count_bin_labels(data, trunk.config.stem_factor) if config.finetune.resolution == "bin" else None
    split = config.finetune.split
    groups = split_groups(split.method, data.sequences, data.ids, data.groups, split.identity, split.kmer,
                          config.data.invalid_smiles)
    unplaced = np.flatnonzero(groups == UNPLACED)  # data.invalid_smiles=skip: in no split, counted and listed
    left_out = {INVALID_SMILES_LEFT_OUT: [data.ids[i] for i in unplaced]} if len(unplaced) else {}
    if len(unplaced):
        data, groups = data.without(unplaced, INVALID_SMILES_LEFT_OUT), np.delete(groups, unplaced)
    sides = assign(groups, split.validation, split.test, config.seed)
    rows = {name: np.flatnonzero(sides == name) for name in ("train", "validation", "test")}
    origin = checkpoint_run_dir(config.ckpt_path) if config.ckpt_path is not None else None
    if origin is not None:  # a resume trains on the split its run began with (a loose .ckpt has no split.tsv)
        check_same_split(origin / SPLIT_FILE, data.ids, sides)

    n_outputs = 1 if config.task == "regression" else len(data.classes)
    model, trainable = build_task_model(config, trunk, n_outputs, mode)
    if config.task == "regression":
        train_values = torch.tensor([data.labels[r] for r in rows["train"]], dtype=torch.float32)
        model.set_target_scale(train_values.mean()[None], train_values.std()[None])
    # As configured (data.max_length null stays null: a resume composes it so); the model and tokenizer init_from's.
    run_config = to_plain(dataclasses.replace(config, model=trunk.config))
    run_config["tokenizer"] = tokenizer.to_config() if hasattr(tokenizer, "to_config") else run_config["tokenizer"]

    monitor = config.finetune.monitor
    trainer = build_trainer(config.trainer, run_dir, control, monitor=f"val/{monitor}",
                            mode="min" if monitor in LOWER_IS_BETTER else "max", patience=config.finetune.patience,
                            distributed=config.trainer.strategy != "auto")
    module = TaskModule(model, config, mode, config.trainer.max_steps, n_outputs, control)
    continue_run(config, run_dir, resumed, module, trainer)  # checks the resume before anything is written
    del resumed
    if trainer.is_global_zero:
        write_split(run_dir / SPLIT_FILE, data.ids, sides, groups)
    write_run_files(run_dir, run_config, tokenizer)
    collate = _collator(config, mode, model, tokenizer, data, trainer.is_global_zero)
    loaders = {name: task_loader(data, rows[name], collate, config.data.batch_size,
                                 trainer if name == "train" else None, config.seed) for name in rows}
    # weights_only: a resumed checkpoint is read without unpickling code (biotf checkpoints hold plain values).
    trainer.fit(module, train_dataloaders=loaders["train"], val_dataloaders=loaders["validation"],
                ckpt_path=config.ckpt_path, weights_only=True)
    train_seconds = module.training_time.seconds()
    if not trainer.is_global_zero:  # every rank trained; rank 0 alone measures and exports
        return None
    if isinstance(trainer.strategy, ShardedStrategy):  # its modules hold shards: the checkpoints become whole files,
        consolidate_run(run_dir / CHECKPOINT_DIR)      # read below into init_from's model built again, unsharded
        trunk = load_source(config.init_from, tokenizer_options=tokenizer_options).network
        module = TaskModule(build_task_model(config, trunk, n_outputs, mode)[0], config, mode,
                            config.trainer.max_steps, n_outputs, control)

    best = trainer.checkpoint_callback.best_model_path or str(run_dir / CHECKPOINT_DIR / "last.ckpt")
    best_checkpoint = read_checkpoint(best)  # its CRC-32 checked
    module.load_state_dict(best_checkpoint["state_dict"])
    results = {name: evaluate(module, loaders[name]) for name in ("validation", "test")}
    write_predictions(run_dir / PREDICTIONS_FILE, data, rows["test"], results["test"][1], config.task)
    _export(module.model, mode, tokenizer, config, data.classes, max_length, run_dir, run_config)

    summary = FinetuneSummary(
        experiment=config.experiment, task=config.task, mode=config.finetune.mode, init_from=str(config.init_from),
        init_from_resolved=str(Path(config.init_from).resolve()), run_dir=str(run_dir),
        parameters=sum(p.numel() for p in module.model.parameters()), trainable_parameters=trainable,
        steps=trainer.global_step, train_seconds=train_seconds, max_length=max_length,
        split={"method": split.method, "groups": int(len(np.unique(groups))),
               "records": {k: int(len(v)) for k, v in rows.items()}, "seed": config.seed},
        dropped=data.dropped, left_out_ids=left_out, cropped=data.cropped, best_checkpoint=best, best_step=int(best_checkpoint["global_step"]),
        validation=results["validation"][0], test=results["test"][0], classes=data.classes,
        policies=dict(sorted(data.policies.items())), resolution=config.finetune.resolution, bin_labels=bin_labels)
    summary.write(run_dir)
    print(summary.text())
    print("predict with it: " + data_command("predict", run_dir, config.data.path, config.data.column,
                                             config.data.id_column, run_dir / "predictions.tsv"))
    return summary


def count_bin_labels(data: LabelledSet, factor: int) -> dict[str, int]:
    """What the majority rule of a bin-resolution token head did to every labelled record's token labels: bins,
    labelled bins, and labelled tokens outvoted (their label differs from their bin's; `stem.majority_bins`)."""
    counts = {"bins": 0, "labelled_bins": 0, "labelled_tokens": 0, "outvoted_tokens": 0}
    for labels in data.labels:
        tokens = torch.from_numpy(labels)[None]
        bins, outvoted = majority_bins(tokens, factor, len(data.classes))
        counts["bins"] += bins.shape[1]
        counts["labelled_bins"] += int((bins != IGNORE_INDEX).sum())
        counts["labelled_tokens"] += int((tokens != IGNORE_INDEX).sum())
        counts["outvoted_tokens"] += int(outvoted)
    return counts


def _collator(config: TrainConfig, mode: Mode, model: TaskModel, tokenizer: Tokenizer, data: LabelledSet,
              rank_zero: bool) -> TaskCollator | FeatureCollator:
    """Batches of tokens; or, when the mode trains no trunk weight and finetune.cache_features is on, of the trunk's
    features of every record, computed once (or read from data.cache_dir) and said on stderr by rank 0 (every rank
    computes them: each trains on its own)."""
    if mode.trains_trunk or not config.finetune.cache_features:
        return TaskCollator(data, tokenizer, config.task)
    start = time.perf_counter()
    features, directory, cached = cached_features(model, tokenizer, data.token_ids, config.data.cache_dir)
    how = "read from" if cached else f"computed in {time.perf_counter() - start:.1f} s, cached in"
    if rank_zero:
        print(f"trunk features of {counted(len(data.token_ids), 'record')} {how} {directory}", file=sys.stderr)
    return FeatureCollator(data, features, config.task)


def _export(model: TaskModel, mode: Mode, tokenizer: Tokenizer, config: TrainConfig, classes: list[str] | None,
            max_length: int, run_dir: Path, run_config: dict[str, Any]) -> None:
    """<run>/model: the trunk (LoRA merged) and the head; with LoRA also the adapter alone."""
    directory = run_dir / MODEL_DIR
    info = TaskInfo(config.task, classes, config.finetune.pool, max_length, config.data.long_policy,
                    config.data.label_column, config.finetune.resolution)
    adapter = mode.before_export(model.trunk, run_dir / f".{ADAPTER_FILE}.tmp")  # moved into the export's staging
    model.trunk.gradient_checkpointing = False
    save_task_model(model.eval(), tokenizer, info, directory, run_config, adapter=adapter)
