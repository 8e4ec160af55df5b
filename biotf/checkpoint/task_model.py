"""A fine-tuned model on disk: the exported trunk, its task head and task.json, written and read as one.

A fine-tuning run exports `<run>/model/`: the trunk as any exported model (`save_pretrained`: config.json,
model.safetensors, tokenizer.json; LoRA adapters merged, so `biotf embed --model <run>/model` embeds with the
fine-tuned trunk), plus `task_head.safetensors` (the head and the regression target scale) and `task.json`
(task, class names, pooling, max_length, long_policy). With LoRA the adapter alone is kept as
`adapter.safetensors` too (`biotf.model.lora.load_adapter` puts it back onto the base model). Every one of these
files is covered by a CRC-32 and checked on each load (`biotf.checkpoint.task_export`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from biotf.checkpoint import FINETUNED_MODEL_DIR as MODEL_DIR
from biotf.checkpoint import TASK_FILE, save_pretrained
from biotf.checkpoint.stored_model import load_exported
from biotf.checkpoint.task_export import ADAPTER_FILE, HEAD_FILE, TaskInfo, read_task_files, write_task_files
from biotf.errors import CheckpointError, ConfigError
from biotf.model.heads import TaskModel
from biotf.tokenizers.base import Tokenizer
from biotf.tokenizers.build import with_options

__all__ = ["ADAPTER_FILE", "HEAD_FILE", "MODEL_DIR", "TaskInfo", "load_task_model", "save_task_model"]


def save_task_model(model: TaskModel, tokenizer: Tokenizer, info: TaskInfo, directory: Path,
                    train_config: dict[str, Any] | None = None, adapter: Path | None = None) -> Path:
    """Write the exported trunk, the head and task.json into a new `directory`, all or nothing; `adapter` (a LoRA
    adapter file written before the merge) is moved in with them."""
    head = {f"head.{k}": v for k, v in model.head.state_dict().items()}
    head.update(target_mean=model.target_mean, target_std=model.target_std)
    return save_pretrained(model.trunk, tokenizer, directory, train_config,
                           also_write=lambda staging: write_task_files(staging, info, head, adapter))


def load_task_model(source: str | Path,
                    tokenizer_options: Mapping[str, Any] | None = None) -> tuple[TaskModel, Tokenizer, TaskInfo]:
    """A fine-tuned model from its exported directory, or from the run directory that holds it (eval mode); every
    file is checked against its CRC-32 and task.json against the head (`read_task_files`) before it is used;
    `tokenizer_options` change policies of its tokenizer (`with_options`)."""
    directory = Path(source)
    if (directory / MODEL_DIR / TASK_FILE).is_file():
        directory = directory / MODEL_DIR
    if not (directory / TASK_FILE).is_file():
        raise CheckpointError(f"{source} is not a fine-tuned model (no {TASK_FILE} in it or in its {MODEL_DIR}/); "
                              "train one with `python train.py experiment=finetune ...`")
    info, state = read_task_files(directory)
    trunk, tokenizer = load_exported(directory)
    tokenizer = with_options(tokenizer, tokenizer_options or {})
    try:
        with torch.random.fork_rng(devices=[]):  # the head's initial draw is overwritten: the caller's stream stays
            model = TaskModel(trunk, info.task, info.n_outputs, pool=info.pool, resolution=info.resolution)
    except ConfigError as error:  # a pooling or resolution this trunk cannot use (cls on a causal model)
        raise CheckpointError(f"{directory / TASK_FILE}: {error}") from None
    try:
        model.head.load_state_dict({k[len("head."):]: v for k, v in state.items() if k.startswith("head.")})
    except RuntimeError as error:
        raise CheckpointError(f"{directory / HEAD_FILE} does not fit the trunk of {directory} "
                              f"({str(error).splitlines()[-1].strip()})") from None
    model.target_mean.copy_(state["target_mean"])
    model.target_std.copy_(state["target_std"])
    return model.eval(), tokenizer, info
