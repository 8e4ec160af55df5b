"""What a training run prints while it trains: a progress bar on a terminal, plain lines anywhere else, and none of
Lightning's own notices.

A tqdm bar redraws itself in place with `\\r` and cursor moves (`ESC[A`): live on a terminal, hundreds of kilobytes of
escape codes in a log file or a pipe. `trainer.progress` chooses: `bar`, `lines` (`ProgressLines`: one plain line
every `biotf.progress.line_seconds()` of training, the interval of every command's plain lines, after each
validation and at the last step) or `auto`, the default: a bar when stdout, where Lightning draws its bars, is a
terminal, else lines. `trainer.enable_progress_bar=false` prints neither.

Lightning announces itself at info level on every run (GPU / TPU available, a tip for its cloud logger, how many
validation batches `limit_val_batches` gives, why `fit` stopped); while a run trains those are silenced
(`quiet_lightning`), its warnings still show, and the run summary says what was done.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import lightning as L
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.trainer.states import TrainerFn

from biotf.progress import duration, is_terminal, line_seconds, number

LIGHTNING_LOGGERS = ("lightning.pytorch", "lightning.fabric")


@contextmanager
def quiet_lightning() -> Iterator[None]:
    """Lightning's info-level messages silenced while the block runs; its warnings and errors still show."""
    loggers = [logging.getLogger(name) for name in LIGHTNING_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def progress_form(form: str, stream: TextIO | None = None) -> str:
    """"bar" or "lines": `form`, with "auto" decided by whether `stream` (default stdout) is a terminal."""
    if form != "auto":
        return form
    return "bar" if is_terminal(stream or sys.stdout) else "lines"


def progress_callbacks(enabled: bool, form: str) -> list[L.Callback]:
    """The callback that shows a run's progress (`trainer.enable_progress_bar`, `trainer.progress`), if any."""
    if not enabled:
        return []
    return [TQDMProgressBar(refresh_rate=1) if progress_form(form) == "bar" else ProgressLines()]


class ProgressLines(L.Callback):
    """Plain progress lines on stdout (rank 0), e.g.
    `step 200/1000 (20%)  train/loss 2.713  train/tokens_per_s 25,109  val/loss 2.702  1m40s, ~6m40s left`:
    the metrics a progress bar would show (`prog_bar=True`), the time this process has trained and an estimate
    of what remains. A line after the first step, then at most every `every_seconds`, after each validation and
    at the end."""

    def __init__(self, every_seconds: float | None = None, stream: TextIO | None = None,
                 clock: Any = time.monotonic):
        self.every_seconds = line_seconds() if every_seconds is None else every_seconds
        self.stream, self.clock = stream, clock
        self._start = self._last = 0.0
        self._first_step = 0
        self._printed_step: int | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = self._last = self.clock()
        self._first_step = trainer.global_step  # a resumed run: the estimate counts only the steps taken here

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        first = self._printed_step is None and trainer.global_step > self._first_step
        if first or self.clock() - self._last >= self.every_seconds:
            self._print(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking:
            self._print(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._printed_step != trainer.global_step:
            self._print(trainer)

    def line(self, trainer: L.Trainer) -> str:
        step, total = trainer.global_step, trainer.max_steps
        parts = [f"step {step}/{total} ({100 * step // total}%)" if total > 0 else f"step {step}"]
        parts += [f"{name} {number(float(value))}" for name, value in trainer.progress_bar_metrics.items()]
        elapsed = self.clock() - self._start
        timing = duration(elapsed)
        done = step - self._first_step
        if total > 0 and done > 0 and step < total:
            timing += f", ~{duration(elapsed / done * (total - step))} left"
        return "  ".join([*parts, timing])

    def _print(self, trainer: L.Trainer) -> None:
        self._last, self._printed_step = self.clock(), trainer.global_step
        if trainer.is_global_zero:
            print(self.line(trainer), file=self.stream or sys.stdout, flush=True)
