"""One training run from a validated `TrainConfig`: build tokenizer, data, model and Trainer, fit, summarise.

Order matters for clear failures: everything that can be wrong in the config was checked by
`config.validate`; then the tokenizer is built (trained on the training split when its vocabulary
is learned), the data is read and tokenized into the cache, and only then does the Trainer start.
With DDP the launcher re-runs this in each worker process: they find the cache built, rebuild the
same tokenizer (deterministic from the same data) and only rank 0 writes into the run directory.
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
import torch
import yaml
from lightning.fabric.utilities.rank_zero import rank_zero_only, rank_zero_warn
from lightning.pytorch.accelerators import CPUAccelerator
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint, ProgressBar
from lightning.pytorch.loggers import TensorBoardLogger

from biotf.io.atomic import atomic_write, atomic_write_text
from biotf.checkpoint import (CHECKPOINT_DIR, CHECKPOINT_KEY, ensure_same_tokenizer, payload_fingerprint)
from biotf.checkpoint.stored_model import load_checkpoint
from biotf.checkpoint.sharded_checkpoint import consolidate, is_sharded, read_resumable
from biotf.data import PreparedData, is_validation, prepare_dataset
from biotf.io.readers import ReaderOptions, read_records
from biotf.tokenizers import Tokenizer, build_tokenizer
from biotf.training.callbacks import (CarryBest, LastCheckpoint, RunControl, RunInterrupted, VerifiedCheckpointIO,
                                     carry_best)
from biotf.training.train_config import TrainConfig, TrainerConfig, to_plain
from biotf.training.datamodule import SequenceDataModule
from biotf.training.metrics_log import RunCSVLogger
from biotf.training.resumable import check_resumable
from biotf.training.module import LanguageModelTask
from biotf.training.fit_progress import progress_callbacks, quiet_lightning
from biotf.training.sharding import ShardedStrategy
from biotf.training.rundir import (RESOLVED_CONFIG, adopt_hydra_files, check_resume, checkpoint_run_dir,
                                  claim_run_dir, discard_hydra_files, is_launch_rank_zero, trim_metrics)
from biotf.training.summary import FinalCheckRun, RunSummary, next_steps

# The run directory already holds Hydra's and our files when the CSV logger starts, and a resumed run's
# checkpoints when ModelCheckpoint starts: expected (rundir.py refuses a directory that holds another run).
warnings.filterwarnings("ignore", message=r"Experiment logs directory .* exists and is not empty")
warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
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


def build_run_tokenizer(config: TrainConfig, resumed: dict[str, Any] | None) -> Tokenizer:
    """The configured tokenizer; when resuming it must equal the checkpoint's (fingerprints compared)."""
    tokenizer = build_tokenizer(config.tokenizer, texts=training_texts(config))
    if resumed is not None:
        source = f"checkpoint {config.ckpt_path}"
        ensure_same_tokenizer(payload_fingerprint(resumed.get(CHECKPOINT_KEY), source), tokenizer, source,
                              candidate="the configured tokenizer")
    return tokenizer


def prepare_data(config: TrainConfig, tokenizer: Tokenizer) -> PreparedData:
    data = config.data
    return prepare_dataset(data.path, tokenizer, data.cache_dir, reader_options(config),
                           validation_fraction=data.validation_fraction, seed=config.seed,
                           max_length=data.max_length, long_policy=data.long_policy, objective=config.objective,
                           packing=data.packing)


def build_trainer(trainer: TrainerConfig, run_dir: Path, control: RunControl | None = None,
                  monitor: str = "val/loss", mode: str = "min", patience: int | None = None,
                  distributed: bool = True) -> L.Trainer:
    """A Trainer writing into `run_dir`: metrics.csv (or tensorboard/), checkpoints/{last,best}.ckpt.

    best.ckpt follows `monitor` (`mode` min or max); with `patience`, that many validations without improvement
    stop training early. A run that is not `distributed` uses one device whatever trainer.devices says.
    `control` is shared with the module (`agree_on_requests` in its training_step), which makes the ranks agree on it."""
    checkpoints = run_dir / CHECKPOINT_DIR
    control = control or RunControl(trainer.checkpoint_every_minutes)
    if trainer.logger == "csv":
        logger = RunCSVLogger(run_dir)  # -> run_dir/metrics.csv, continued by a resume
    else:
        logger = TensorBoardLogger(save_dir=run_dir, name="tensorboard", version="")
    best = ModelCheckpoint(dirpath=checkpoints, filename="best", monitor=monitor, mode=mode, save_top_k=1,
                           auto_insert_metric_name=False, enable_version_counter=False)
    callbacks = [LastCheckpoint(checkpoints / "last.ckpt", trainer.checkpoint_every_n_steps, control), best,
                 CarryBest(best)]
    if patience is not None:
        callbacks.append(EarlyStopping(monitor=monitor, mode=mode, patience=patience, check_on_train_epoch_end=False))
    progress = progress_callbacks(trainer.enable_progress_bar, trainer.progress)
    callbacks += progress
    strategy, precision = trainer.strategy if distributed else "auto", trainer.precision
    if strategy == "fsdp":  # FSDP2's own mixed precision (`ShardedStrategy.shard`), not Lightning's autocast
        strategy, precision = ShardedStrategy(mixed_precision=precision == "bf16-mixed"), "32-true"
    built = L.Trainer(
        accelerator=trainer.accelerator, devices=trainer.devices if distributed else 1,
        num_nodes=trainer.num_nodes if distributed else 1, strategy=strategy,
        precision=precision, max_steps=trainer.max_steps, max_epochs=-1,
        # Validation every n training batches, counted across epoch boundaries.
        val_check_interval=trainer.val_check_interval, check_val_every_n_epoch=None,
        limit_val_batches=trainer.limit_val_batches, accumulate_grad_batches=trainer.accumulate_grad_batches,
        gradient_clip_val=trainer.gradient_clip_val or None, log_every_n_steps=trainer.log_every_n_steps,
        logger=logger, callbacks=callbacks,
        plugins=[VerifiedCheckpointIO()], default_root_dir=run_dir,
        enable_progress_bar=any(isinstance(c, ProgressBar) for c in progress),  # else Lightning adds its own bar
        enable_model_summary=False, num_sanity_val_steps=0,
        # The batch sampler shards by rank itself (and resumes mid-epoch); Lightning must not replace it.
        use_distributed_sampler=False,
    )
    if trainer.precision == "bf16-mixed" and isinstance(built.accelerator, CPUAccelerator) \
            and not torch.ops.mkldnn._is_mkldnn_bf16_supported():
        rank_zero_warn("trainer.precision=bf16-mixed on a CPU without native bfloat16 (AVX512-BF16 or AMX): its "
                       "matrix products take a reference path, about 100x slower than float32. Use "
                       "trainer.precision=32 here.")
    return built


def consolidate_run(checkpoints: Path) -> Path:
    """An FSDP run's sharded checkpoints (last and best) turned into the single files a DDP run writes, so that every
    command reads the run as any other; returns the last one."""
    for name in ("best.ckpt", "last.ckpt"):
        if is_sharded(checkpoints / name):
            consolidate(checkpoints / name)
    return checkpoints / "last.ckpt"


@rank_zero_only
def write_run_files(run_dir: Path, run_config: dict[str, Any], tokenizer: Tokenizer) -> None:
    """The resolved config and the tokenizer, written before training so a killed run still has them; each
    appears complete or not at all. The run is accepted: Hydra's files of it join them (`adopt_hydra_files`)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    adopt_hydra_files(run_dir)
    atomic_write_text(run_dir / RESOLVED_CONFIG, yaml.safe_dump(run_config, sort_keys=False))
    with tempfile.TemporaryDirectory(prefix=".tokenizer.", dir=run_dir) as staging:
        written = tokenizer.save(staging)  # Tokenizer.save writes under the final name: staged, then renamed
        atomic_write(run_dir / written.name, lambda temporary: os.replace(written, temporary))


@contextmanager
def sigterm_stops(control: RunControl) -> Iterator[None]:
    """SIGTERM before training starts stops at once (nothing to save); during training `LastCheckpoint` saves
    at the end of the optimizer step and stops; after the last step the run finishes its final validation (seconds)
    and stops before or during its final checks (`stoppable`)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def before_training(signum: int, frame: Any) -> None:
        control.on_sigterm(signum, frame)
        if not control.started:
            raise RunInterrupted(None)
        if control.stop_at_once is not None:
            raise control.stop_at_once

    previous = signal.signal(signal.SIGTERM, before_training)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def stoppable(control: RunControl, stop: RunInterrupted) -> Iterator[None]:
    """Raise `stop` on SIGTERM while the block measures the trained model (1,000 SMILES samples take minutes), or
    at once when SIGTERM came since training ended: last.ckpt holds the final step, so a resume from it trains no
    further and measures again."""
    if control.sigterm:
        raise stop
    control.stop_at_once = stop
    try:
        yield
    finally:
        control.stop_at_once = None


def read_resumed(config: TrainConfig) -> dict[str, Any] | None:
    """The checkpoint `ckpt_path` names (None when the run does not resume), read and checked against its CRC-32
    before any data work, so that a damaged checkpoint fails in seconds: a file, or a sharded (FSDP) checkpoint's
    every shard (`read_resumable`)."""
    return None if config.ckpt_path is None else read_resumable(config.ckpt_path)


def continue_run(config: TrainConfig, run_dir: Path, resumed: dict[str, Any] | None, module: L.LightningModule,
                 trainer: L.Trainer) -> None:
    """Before a resume writes anything into `run_dir`: its checkpoint checked against the module and Trainer about to
    load it (`check_resumable`); then its best checkpoint put into the run's checkpoints/ when it is not there
    (`carry_best`: a resume from another directory keeps the run's best), and, in place, metrics.csv's rows up to the
    resumed step kept (`trim_metrics`: those after it are logged again)."""
    if resumed is None:
        return
    # A sharded checkpoint's weights and optimizer state are its ranks' shards: each checked against its CRC-32
    # (`read_resumable`), resharded onto this run's ranks as they load.
    if not is_sharded(config.ckpt_path):
        check_resumable(resumed, module, trainer, str(config.ckpt_path))
        trainer.strategy.checkpoint_io.hand_over(config.ckpt_path, resumed)  # fit loads what was checked
    if not is_launch_rank_zero():
        return
    carry_best(resumed, config.ckpt_path, run_dir / CHECKPOINT_DIR)
    if checkpoint_run_dir(config.ckpt_path) == run_dir.resolve():
        trim_metrics(run_dir, resumed["global_step"])


@contextmanager
def held_run(config: TrainConfig, run_dir: Path) -> Iterator[RunControl]:
    """The run directory claimed (`claim_run_dir`), SIGTERM turned into a save-and-stop (`sigterm_stops`) and
    Lightning's notices silenced (`quiet_lightning`) while the block trains; yields the run's control, for
    `build_trainer` and the module. Every kind of run trains inside it, a resume once its settings are known to be
    its run's (`check_resume`, before anything is written). A run refused before it writes its files leaves Hydra's
    .hydra/ as it was (`discard_hydra_files`)."""
    try:
        check_resume(config)
        control = RunControl(config.trainer.checkpoint_every_minutes)
        with claim_run_dir(run_dir, config.ckpt_path), sigterm_stops(control), quiet_lightning():
            yield control
    finally:
        discard_hydra_files(run_dir)


def train(config: TrainConfig, run_dir: str | Path, checks: Sequence[FinalCheckRun] = ()) -> RunSummary:
    """Train as `config` says, writing everything into `run_dir`; returns the summary (on every rank), with the
    figures of `checks` measured on the final weights on rank 0.

    Raises `RunInterrupted` after saving last.ckpt when SIGTERM arrives during training."""
    run_dir = Path(run_dir)
    with held_run(config, run_dir) as control:
        return _train(config, run_dir, control, checks)


def _train(config: TrainConfig, run_dir: Path, control: RunControl, checks: Sequence[FinalCheckRun]) -> RunSummary:
    L.seed_everything(config.seed, workers=True, verbose=False)
    resumed = read_resumed(config)
    tokenizer = build_run_tokenizer(config, resumed)
    prepared = prepare_data(config, tokenizer)
    model_config = config.model.for_tokenizer(tokenizer.vocab_size, tokenizer.mask_id)
    task = LanguageModelTask(model_config, tokenizer, config.optim, config.trainer.max_steps,
                             compile=config.trainer.compile, train_config=to_plain(config),
                             nonfinite=config.trainer.nonfinite, control=control,
                             fused_loss=config.trainer.fused_loss)
    task.model.gradient_checkpointing = config.trainer.gradient_checkpointing
    datamodule = SequenceDataModule(prepared, tokenizer, config.data, config.seed)
    trainer = build_trainer(config.trainer, run_dir, control)
    continue_run(config, run_dir, resumed, task, trainer)
    del resumed
    write_run_files(run_dir, to_plain(config), tokenizer)

    # weights_only: a resumed checkpoint is read without unpickling code (biotf checkpoints hold plain values).
    trainer.fit(task, datamodule=datamodule, ckpt_path=config.ckpt_path, weights_only=True)
    train_seconds = task.train_seconds()
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
        model = task.model
        if isinstance(trainer.strategy, ShardedStrategy):  # every rank wrote its shard; the other ranks are done
            consolidated = consolidate_run(run_dir / CHECKPOINT_DIR)
            model = load_checkpoint(consolidated)[0] if checks else model
        if checks:
            with stoppable(control, RunInterrupted(run_dir / CHECKPOINT_DIR / "last.ckpt", trainer.global_step)):
                summary.checks = [check(model, tokenizer) for check in checks]
        summary.write(run_dir)
        print(summary.text())
        print(next_steps(run_dir, config.data.path, config.data.column, config.data.id_column))
    return summary
