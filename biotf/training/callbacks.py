"""Checkpointing pieces: verified atomic checkpoint files, the RNG state they carry, and when `last.ckpt` is written.

`last.ckpt` is written every `trainer.checkpoint_every_n_steps` optimizer steps, every
`trainer.checkpoint_every_minutes` of wall time, after the first validation, at the end (the final step, or an
early stop), and when the process receives SIGTERM (preemption, `docker stop`, Slurm's time limit): then the run
saves at the end of the current optimizer step and stops before the next one (`RunInterrupted`, which says
where and how to resume); a SIGTERM during the last step lets the run finish.
Every save happens at the end of an optimizer step, the point a resume continues from exactly.

best.ckpt (Lightning's ModelCheckpoint) survives a resume from another directory, or of a moved or copied run
directory: `carry_best` copies the best checkpoint the resumed one records into the run's checkpoints/ before
anything else is written, and `CarryBest` points the record of it (path and score) there, which Lightning would
otherwise drop ("best_model_score won't be reloaded") and so export a worse "best" model.
"""

from __future__ import annotations

import math
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from biotf.checkpoint import read_checkpoint, save_checkpoint
from biotf.checkpoint.sharded_checkpoint import copy_checkpoint, read_resumable
from biotf.errors import CheckpointError

SIGTERM_STATUS = 128 + signal.SIGTERM  # the exit status a shell reports for a process ended by SIGTERM
RNG_KEY = "biotf_rng"
PROGRESS_KEY = "biotf_progress"  # training seconds so far (and tokens seen): a resumed run's summary counts them all


class VerifiedCheckpointIO(TorchCheckpointIO):
    """Checkpoints written atomically with their content CRC-32 (`biotf.checkpoint`), checked when resumed.

    A resume hands over the checkpoint it read and checked (`hand_over`): Lightning then loads that one, not the
    file again, which another process (the run it was read from, resumed in place) may have replaced meanwhile."""

    def __init__(self) -> None:
        super().__init__()
        self._handed_over: tuple[Path, dict[str, Any]] | None = None

    def hand_over(self, path: str | Path, checkpoint: dict[str, Any]) -> None:
        self._handed_over = (Path(path).resolve(), checkpoint)

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None) -> None:
        save_checkpoint(checkpoint, path)

    def load_checkpoint(self, path: str | Path, map_location: Any | None = None,
                        weights_only: bool | None = None) -> dict[str, Any]:
        handed_over, self._handed_over = self._handed_over, None
        if handed_over is not None and handed_over[0] == Path(path).resolve():
            return handed_over[1]
        return read_checkpoint(path, map_location=map_location or "cpu")  # always weights_only


def save_rng_state(checkpoint: dict[str, Any], module: L.LightningModule) -> None:
    """The torch (and CUDA) RNG state into `checkpoint`, so that dropout after a resume repeats the uninterrupted run:
    every rank's CPU state under DDP (each rank draws its own dropout masks; rank 0 alone writes the file), gathered
    by the one collective every rank reaches when Lightning builds the checkpoint on each of them."""
    state = torch.get_rng_state()
    checkpoint[RNG_KEY] = {"torch": state}
    if module.trainer.world_size > 1:
        # as int32 words: every backend gathers those (the state is 5,056 bytes)
        words = [torch.empty(len(state) // 4, dtype=torch.int32) for _ in range(module.trainer.world_size)]
        torch.distributed.all_gather(words, state.view(torch.int32))
        checkpoint[RNG_KEY]["torch_by_rank"] = torch.stack(words).view(torch.uint8)
    if torch.cuda.is_available():
        checkpoint[RNG_KEY]["cuda"] = torch.cuda.get_rng_state_all()


def restore_rng_state(checkpoint: dict[str, Any], module: L.LightningModule) -> None:
    """This rank's state from `save_rng_state`; rank 0's when the checkpoint was written by another number of
    processes (a resume may change devices and nodes, and then runs other batches on each rank anyway)."""
    state = checkpoint.get(RNG_KEY)
    if state is None:
        return
    by_rank = state.get("torch_by_rank")
    same_world = by_rank is not None and len(by_rank) == module.trainer.world_size
    # a clone: set_rng_state reads a row of the stacked states from its storage's start (and crashes)
    torch.set_rng_state(by_rank[module.global_rank].clone() if same_world else state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class TrainingTime:
    """Training wall time over every process that trained the run: a resumed run starts from the seconds its
    checkpoint carries (`before`), so its summary counts the time before the stop too."""

    clock = staticmethod(time.perf_counter)

    def __init__(self) -> None:
        self.before = 0.0
        self._start: float | None = None

    def start(self) -> None:
        self._start = self.clock()

    def seconds(self) -> float:
        return self.before + (self.clock() - self._start if self._start is not None else 0.0)


class RunInterrupted(Exception):
    """Training stopped on SIGTERM after saving `path` at optimizer step `step` (None: before training began)."""

    def __init__(self, path: Path | None, step: int = 0):
        self.path, self.step = path, step
        super().__init__(f"stopped by SIGTERM at step {step}; saved {path}" if path is not None
                         else "stopped by SIGTERM before training began; no checkpoint written")


class RunControl:
    """Requests every rank must act on at the same optimizer step: save now (the wall-time clock ran out),
    stop now (SIGTERM). Each process notes its own (`requests`); the task combines them across ranks in
    the one reduction it makes per step anyway (`agree_on_requests`, from each module's training_step) and hands
    the result back (`agree`), so a checkpoint write, which all ranks join, starts on all of them together."""

    clock = staticmethod(time.monotonic)

    def __init__(self, every_minutes: float):
        self.every_seconds = every_minutes * 60.0
        self.next_save = math.inf
        self.sigterm = False
        self.save_agreed = self.stop_agreed = False
        self.stop_at_once: RunInterrupted | None = None  # raised by SIGTERM after training (`run.stoppable`)

    @property
    def started(self) -> bool:
        """Whether training began (the wall-time clock starts with it)."""
        return self.next_save != math.inf

    def requests(self) -> tuple[bool, bool]:
        """(stop, save) as this process sees them: one flag and one clock read, nothing more per step."""
        return self.sigterm, self.clock() >= self.next_save

    def agree(self, stop: bool, save: bool) -> None:
        self.stop_agreed, self.save_agreed = stop, save

    def saved(self) -> None:
        self.next_save = self.clock() + self.every_seconds
        self.save_agreed = False

    def on_sigterm(self, signum: int, frame: Any) -> None:
        self.sigterm = True


def agree_on_requests(module: L.LightningModule, control: RunControl | None, finite: bool = True) -> bool:
    """Whether the loss is finite on every rank, and the run control's requests (stop, save) of any rank, in one
    reduction, made by each training step: one rank skipping alone would leave the others waiting in backward, one
    rank saving alone would leave them waiting in the checkpoint write."""
    stop, save = control.requests() if control is not None else (False, False)
    flags = torch.tensor([not finite, stop, save], dtype=torch.float32, device=module.device)
    not_finite, stop, save = (value > 0 for value in module.trainer.strategy.reduce(flags, reduce_op="sum").tolist())
    if control is not None:
        control.agree(stop, save)
    return not not_finite


class LastCheckpoint(L.Callback):
    """Writes `path` (checkpoints/last.ckpt) as the module docstring lists; stops the run on SIGTERM.

    Lightning's ModelCheckpoint saves on multiples of n only, so a run whose max_steps is not a
    multiple would end with a stale last.ckpt; this one always ends with the final weights.
    """

    def __init__(self, path: str | Path, every_n_steps: int, control: RunControl):
        self.path, self.every_n_steps, self.control = Path(path), every_n_steps, control
        self._last_step = self._saved_step = -1
        self._validated = self._after_validation = False
        self._stopping: RunInterrupted | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._last_step = trainer.global_step
        self.control.saved()  # the wall-time clock starts now
        # Lightning installed its own SIGTERM handler (it raises at once, saving nothing); ours waits for the
        # end of the optimizer step. Lightning restores the previous handler when fit ends.
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self.control.on_sigterm)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit" and not trainer.sanity_checking and not self._validated:
            self._validated = True
            self._after_validation = self._saved_step != trainer.global_step

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        step = trainer.global_step
        # With gradient accumulation several batches end at the same step; act once, after it stepped.
        if step == self._last_step:
            return
        self._last_step = step
        control = self.control
        if (step % self.every_n_steps == 0 or step >= trainer.max_steps or self._after_validation
                or control.save_agreed or control.stop_agreed):
            trainer.save_checkpoint(self.path, weights_only=False)
            self._saved_step, self._after_validation = step, False
            control.saved()
        if control.stop_agreed:  # stopped as the next batch starts, once this step's metrics are logged
            self._stopping = RunInterrupted(self.path, step)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.global_step != self._saved_step:  # stopped early (a fine-tuning run's EarlyStopping)
            trainer.save_checkpoint(self.path, weights_only=False)
            self._saved_step = trainer.global_step

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        if self._stopping is not None:
            raise self._stopping


def _best_state(checkpoint: dict[str, Any]) -> dict[str, Any] | None:
    """The ModelCheckpoint state (best.ckpt's directory, path and score) a checkpoint carries."""
    for key, state in (checkpoint.get("callbacks") or {}).items():
        if str(key).startswith("ModelCheckpoint"):
            return state
    return None


def carry_best(resumed: dict[str, Any], ckpt_path: str | Path, directory: Path) -> None:
    """Put the best checkpoint `resumed` (read from `ckpt_path`) records into `directory` (the run's checkpoints/)
    under its name, unless it is there: from beside `ckpt_path` (a resume from another directory, or of a moved
    one), else from the path it records. A best that is nowhere is refused: the run would export a worse one; so is
    one that is no longer the recorded best (its run, resumed in place meanwhile, found a better one)."""
    state = _best_state(resumed)
    if state is None or not state.get("best_model_path") or state.get("best_model_score") is None:
        return
    recorded = Path(state["best_model_path"])
    target = directory / recorded.name
    if target.exists():
        return
    source = next((p for p in (Path(ckpt_path).parent / recorded.name, recorded) if p.exists()), None)
    if source is None:
        raise CheckpointError(f"{ckpt_path} records the best checkpoint {recorded} (score "
                              f"{float(state['best_model_score']):.6g}), which is gone; put it beside {ckpt_path} to "
                              "resume, or start a new run")
    created = not directory.exists()
    directory.mkdir(parents=True, exist_ok=True)
    copy_checkpoint(source, target)  # a file, or an FSDP run's sharded directory
    copied = read_resumable(target)  # what was copied, in case the source was replaced while it was read
    copied_state = _best_state(copied) or {}
    if copied.get("global_step", 0) > resumed.get("global_step", 0) \
            or float(copied_state.get("best_model_score", math.nan)) != float(state["best_model_score"]):
        if target.is_dir():
            shutil.rmtree(target)
        else:
            target.unlink()
        if created:  # the run directory as it was: a checkpoints/ folder would mark it as used
            directory.rmdir()
        raise CheckpointError(f"{source} is no longer the best checkpoint {ckpt_path} records (score "
                              f"{float(state['best_model_score']):.6g}): the run that wrote it went on training "
                              "meanwhile; resume from its newer checkpoint, or start a new run")


class CarryBest(L.Callback):
    """Rebases the resumed record of best.ckpt onto this run's `best` callback (see the module docstring): the
    score, and the copy `carry_best` made, instead of Lightning's reset when the directory differs."""

    def __init__(self, best: ModelCheckpoint):
        self.best = best

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        state = _best_state(checkpoint)  # runs before the callbacks' states are loaded from `checkpoint`
        if state is None or state.get("dirpath") == self.best.dirpath:
            return
        state.update(dirpath=self.best.dirpath, last_model_path="")
        if state.get("best_model_path") and state.get("best_model_score") is not None:
            here = str(Path(self.best.dirpath) / Path(state["best_model_path"]).name)
            score = state["best_model_score"]
            state.update(best_model_path=here, best_k_models={here: score}, kth_best_model_path=here, kth_value=score)
        else:
            state.update(best_model_path="", best_k_models={}, kth_best_model_path="")
