"""One training run from a validated `TrainConfig`: build tokenizer, data, model and Trainer, fit, summarise.

Order matters for clear failures: everything that can be wrong in the config was checked by
`config.validate`; then the tokenizer is built (trained on the training split when its vocabulary
is learned), the data is read and tokenized into the cache, and only then does the Trainer start.
With DDP the launcher re-runs this in each worker process: they find the cache built, rebuild the
same tokenizer (deterministic from the same data) and only rank 0 writes into the run directory.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import lightning as L
import torch
import yaml
from lightning.fabric.utilities.rank_zero import rank_zero_only, rank_zero_warn
from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar
from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger

from biotf.data import PreparedData, ReaderOptions, is_validation, prepare_dataset, read_records
from biotf.inference.loading import CHECKPOINT_DIR, check_tokenizer, read_checkpoint_payload
from biotf.tokenizers import Tokenizer, build_tokenizer
from biotf.training.callbacks import AtomicCheckpointIO, LastCheckpoint
from biotf.training.config import TrainConfig, TrainerConfig, to_plain
from biotf.training.datamodule import SequenceDataModule
from biotf.training.module import LanguageModelTask
from biotf.training.summary import RunSummary, next_steps

RESOLVED_CONFIG = "config.yaml"

# The run directory already holds Hydra's and our files when the CSV logger starts: expected, not a problem.
warnings.filterwarnings("ignore", message=r"Experiment logs directory .* exists and is not empty")
# Emitted by Lightning's own pytree use under torch 2.13; nothing a user can act on.
warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")


def reader_options(config: TrainConfig) -> ReaderOptions:
    data = config.data
    return ReaderOptions(format=data.format, column=data.column, id_column=data.id_column)


def training_texts(config: TrainConfig) -> Iterator[str]:
    """The training split's sequences (streamed), for tokenizers whose vocabulary is learned.

    Validation records are left out (same hash split as the data layer), so the validation loss
    is not flattered by a vocabulary fitted to it.
    """
    fraction = config.data.validation_fraction
    for record in read_records(config.data.path, reader_options(config)):
        if not is_validation(record.sequence, fraction, config.seed):
            yield record.sequence


def build_run_tokenizer(config: TrainConfig) -> Tokenizer:
    """The configured tokenizer; when resuming it must equal the checkpoint's (fingerprints compared)."""
    tokenizer = build_tokenizer(config.tokenizer, texts=training_texts(config))
    if config.ckpt_path is not None:
        check_tokenizer(read_checkpoint_payload(config.ckpt_path), tokenizer, f"checkpoint {config.ckpt_path}")
    return tokenizer


def prepare_data(config: TrainConfig, tokenizer: Tokenizer) -> PreparedData:
    data = config.data
    return prepare_dataset(data.path, tokenizer, data.cache_dir, reader_options(config),
                           validation_fraction=data.validation_fraction, seed=config.seed,
                           max_length=data.max_length, long_policy=data.long_policy, objective=config.objective)


def build_trainer(trainer: TrainerConfig, run_dir: Path) -> L.Trainer:
    """A Trainer writing into `run_dir`: metrics.csv (or tensorboard/), checkpoints/{last,best}.ckpt."""
    checkpoints = run_dir / CHECKPOINT_DIR
    if trainer.logger == "csv":
        logger = CSVLogger(save_dir=run_dir, name="", version="")  # -> run_dir/metrics.csv
    else:
        logger = TensorBoardLogger(save_dir=run_dir, name="tensorboard", version="")
    best = ModelCheckpoint(dirpath=checkpoints, filename="best", monitor="val/loss", mode="min", save_top_k=1,
                           auto_insert_metric_name=False, enable_version_counter=False)
    callbacks = [LastCheckpoint(checkpoints / "last.ckpt", trainer.checkpoint_every_n_steps), best]
    if trainer.enable_progress_bar:  # tqdm: loss, tokens/s and val/loss on one line, also in plain logs
        callbacks.append(TQDMProgressBar(refresh_rate=1))
    built = L.Trainer(
        accelerator=trainer.accelerator, devices=trainer.devices, num_nodes=trainer.num_nodes,
        strategy=trainer.strategy, precision=trainer.precision, max_steps=trainer.max_steps, max_epochs=-1,
        # Validation every n training batches, counted across epoch boundaries.
        val_check_interval=trainer.val_check_interval, check_val_every_n_epoch=None,
        limit_val_batches=trainer.limit_val_batches, accumulate_grad_batches=trainer.accumulate_grad_batches,
        gradient_clip_val=trainer.gradient_clip_val or None, log_every_n_steps=trainer.log_every_n_steps,
        logger=logger, callbacks=callbacks,
        plugins=[AtomicCheckpointIO()], default_root_dir=run_dir, enable_progress_bar=trainer.enable_progress_bar,
        enable_model_summary=False, num_sanity_val_steps=0,
        # The batch sampler shards by rank itself (and resumes mid-epoch); Lightning must not replace it.
        use_distributed_sampler=False,
    )
    if trainer.precision == "bf16-mixed" and isinstance(built.accelerator, CPUAccelerator) \
            and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        rank_zero_warn("trainer.precision=bf16-mixed on a CPU without native bfloat16 (AVX512-BF16 or AMX): its "
                       "matrix products take a reference path, about 100x slower than float32 (1.2 against 147 "
                       "GFLOP/s on a 2-core AVX2 machine). Use trainer.precision=32 here.")
    return built


@rank_zero_only
def write_run_files(run_dir: Path, config: TrainConfig, tokenizer: Tokenizer) -> None:
    """The resolved config and the tokenizer, written before training so a killed run still has them."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / RESOLVED_CONFIG).write_text(yaml.safe_dump(to_plain(config), sort_keys=False), encoding="utf-8")
    tokenizer.save(run_dir)


def train(config: TrainConfig, run_dir: str | Path) -> RunSummary:
    """Train as `config` says, writing everything into `run_dir`; returns the summary (on every rank)."""
    run_dir = Path(run_dir)
    L.seed_everything(config.seed, workers=True, verbose=False)
    tokenizer = build_run_tokenizer(config)
    prepared = prepare_data(config, tokenizer)
    model_config = config.model.for_tokenizer(tokenizer.vocab_size, tokenizer.mask_id)
    task = LanguageModelTask(model_config, tokenizer, config.optim, config.trainer.max_steps,
                             compile=config.trainer.compile, train_config=to_plain(config),
                             nonfinite=config.trainer.nonfinite)
    task.model.gradient_checkpointing = config.trainer.gradient_checkpointing
    datamodule = SequenceDataModule(prepared, tokenizer, config.data, config.seed)
    trainer = build_trainer(config.trainer, run_dir)
    write_run_files(run_dir, config, tokenizer)

    start = time.perf_counter()
    # weights_only: a resumed checkpoint is read without unpickling code (biotf checkpoints hold plain values).
    trainer.fit(task, datamodule=datamodule, ckpt_path=config.ckpt_path, weights_only=True)
    train_seconds = time.perf_counter() - start
    # A last validation on the final weights: the periodic ones need not fall on the last step.
    final = trainer.validate(task, datamodule=datamodule, verbose=False)[0]
    best_score = trainer.checkpoint_callback.best_model_score if trainer.checkpoint_callback else None
    summary = RunSummary(
        experiment=config.experiment, run_dir=str(run_dir), objective=config.objective,
        parameters=task.model.num_parameters(), steps=trainer.global_step, train_seconds=train_seconds,
        tokens_seen=task.tokens_seen, nonfinite_skipped=task.nonfinite_skipped, final_val_loss=float(final["val/loss"]), final_val_ppl=float(final["val/ppl"]),
        final_val_acc=float(final["val/acc"]), best_val_loss=float(best_score) if best_score is not None else None,
        unigram_baseline=prepared.unigram_baseline("validation"), data=prepared.summary())
    if trainer.is_global_zero:
        summary.write(run_dir)
        print(summary.text())
        print(next_steps(run_dir, config.data.path, config.data.column, config.data.id_column))
    return summary
