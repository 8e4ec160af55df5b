"""One pre-flight check of a resumed checkpoint against the module and Trainer about to load it.

Lightning loads a checkpoint's parts one by one inside `trainer.fit`: the weights, then each optimizer's state, the
schedule, the callbacks' and the loops' states. A part that does not fit (an optimizer member's state missing, a
schedule of another length, an edited callback state) then fails with a traceback after the run directory was
continued (config.yaml rewritten, metrics.csv trimmed). `check_resumable` tries every part first, on copies (a
throwaway optimizer and schedule built by the module's own `configure_optimizers`, deep copies of the callbacks),
so that a checkpoint that cannot be resumed is one line before anything in the run directory changes.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping
from typing import Any

import lightning as L
import torch

from biotf.errors import CheckpointError

# What `trainer.fit(ckpt_path=...)` reads from a checkpoint besides the module's own keys.
RESUMED_PARTS = ("state_dict", "optimizer_states", "lr_schedulers", "loops", "callbacks", "global_step")
# What a part's load raises when its state is not the one it expects.
LOAD_ERRORS = (KeyError, ValueError, TypeError, IndexError, AttributeError, RuntimeError)


def check_resumable(checkpoint: dict[str, Any], module: L.LightningModule, trainer: L.Trainer, source: str) -> None:
    """Raise CheckpointError, naming `source` and the part, unless every part of `checkpoint` that a resume loads
    fits `module` (weights, optimizer, schedule) and `trainer` (callbacks, loops). Changes neither."""
    missing = [part for part in RESUMED_PARTS if part not in checkpoint]
    if missing:
        raise CheckpointError(f"{source} cannot be resumed: it lacks {', '.join(missing)} (a weights-only file? "
                              "resume from the run's checkpoints/last.ckpt)")
    try:
        _check_weights(checkpoint["state_dict"], module)
        _check_optimizer(checkpoint["optimizer_states"], checkpoint["lr_schedulers"], module)
        _check_callbacks(checkpoint["callbacks"], trainer)
        if not isinstance(checkpoint["loops"], Mapping) or not isinstance(checkpoint["loops"].get("fit_loop"),
                                                                            Mapping):
            raise ValueError("its loop state (loops.fit_loop) is not a mapping")
    except LOAD_ERRORS as error:
        reason = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
        raise CheckpointError(f"{source} cannot be resumed by this run: {reason.splitlines()[0]}") from None


def _check_weights(saved: Any, module: L.LightningModule) -> None:
    if not isinstance(saved, Mapping):
        raise ValueError("its weights (state_dict) are not a mapping")
    expected = module.state_dict()
    missing, unexpected = sorted(expected.keys() - saved.keys()), sorted(saved.keys() - expected.keys())
    if missing or unexpected:
        raise ValueError(f"its weights are not this model's (missing {missing[:3]}, unexpected {unexpected[:3]})")
    for name, tensor in expected.items():
        if not isinstance(saved[name], torch.Tensor) or saved[name].shape != tensor.shape:
            shape = tuple(saved[name].shape) if isinstance(saved[name], torch.Tensor) else type(saved[name]).__name__
            raise ValueError(f"its weight {name} has shape {shape}, this model's {tuple(tensor.shape)}")


def _check_optimizer(optimizer_states: Any, scheduler_states: Any, module: L.LightningModule) -> None:
    """Load the optimizer and schedule states into a throwaway optimizer and schedule of the module's own making."""
    built = module.configure_optimizers()
    optimizer, scheduler = built["optimizer"], built["lr_scheduler"]["scheduler"]
    if not isinstance(optimizer_states, list) or len(optimizer_states) != 1:
        raise ValueError("its optimizer states are not one optimizer's")
    try:
        optimizer.load_state_dict(optimizer_states[0])  # reads it: the state's tensors are shared, not copied
    except LOAD_ERRORS as error:
        raise ValueError(f"its optimizer state does not fit this run's optimizer ({error})") from None
    for member in getattr(optimizer, "members", [optimizer]):  # a Combined optimizer's state is in its members
        for group in member.param_groups:
            for parameter in group["params"]:
                for name, value in member.state.get(parameter, {}).items():
                    if isinstance(value, torch.Tensor) and value.ndim and value.shape != parameter.shape:
                        raise ValueError(f"its optimizer state {name} has shape {tuple(value.shape)} for a weight of "
                                         f"shape {tuple(parameter.shape)}")
    if not isinstance(scheduler_states, list) or len(scheduler_states) != 1:
        raise ValueError("its learning-rate schedule states are not one schedule's")
    state = scheduler_states[0]
    if not isinstance(state, Mapping) or len(state.get("base_lrs") or ()) != len(optimizer.param_groups):
        raise ValueError(f"its learning-rate schedule is not one of {len(optimizer.param_groups)} parameter groups")
    try:
        scheduler.load_state_dict(dict(state))  # a copy of the mapping: LambdaLR pops a key of what it is given
    except LOAD_ERRORS as error:
        raise ValueError(f"its learning-rate schedule does not fit this run's ({error})") from None


def _check_callbacks(states: Any, trainer: L.Trainer) -> None:
    """Load each callback's saved state into a copy of the callback (Lightning loads those it finds by state key)."""
    if not isinstance(states, Mapping):
        raise ValueError("its callback states are not a mapping")
    for callback in trainer.callbacks:
        state = states.get(callback.state_key)
        if state is None:
            continue
        if not isinstance(state, Mapping):
            raise ValueError(f"its state of {type(callback).__name__} is not a mapping")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # ModelCheckpoint's notice of another directory: `CarryBest` rebases
                copy.deepcopy(callback).load_state_dict(copy.deepcopy(dict(state)))
        except LOAD_ERRORS as error:
            raise ValueError(f"its state of {type(callback).__name__} does not fit ({error})") from None
