"""A fine-tuned model on disk, and predictions with it (`biotf predict`).

A fine-tuning run exports `<run>/model/`: the trunk as any exported model (`save_pretrained`: config.json,
model.safetensors, tokenizer.json; LoRA adapters merged, so `biotf embed --model <run>/model` embeds with the
fine-tuned trunk), plus `task_head.safetensors` (the head and the regression target scale) and `task.json`
(task, class names, pooling, max_length, long_policy). With LoRA the adapter alone is kept as
`adapter.safetensors` too (`biotf.model.lora.load_adapter` puts it back onto the base model). Every one of these
files is covered by a CRC-32 and checked on each load (`biotf.checkpoint.task_export`).

Inputs are encoded as in training (`encode_for_task`): a record longer than max_length tokens is cut to its first
max_length tokens, its trailing special token kept (policy crop, counted), skipped (drop, counted) or refused (error).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import torch

from biotf.checkpoint import FINETUNED_MODEL_DIR as MODEL_DIR
from biotf.checkpoint import TASK_FILE, save_pretrained
from biotf.checkpoint.task_export import ADAPTER_FILE, HEAD_FILE, TaskInfo, read_task_files, write_task_files
from biotf.data.long_policy import LongPolicy
from biotf.errors import CheckpointError, ConfigError
from biotf.inference.loading import load_exported
from biotf.model.tasks import TaskModel
from biotf.tokenizers.base import Tokenizer

__all__ = ["ADAPTER_FILE", "HEAD_FILE", "MODEL_DIR", "TaskInfo", "content_mask", "encode_for_task", "load_task_model",
           "predict", "save_task_model"]


def encode_for_task(tokenizer: Tokenizer, sequence: str, record: str, max_length: int, long_policy: str,
                    counts: Counter) -> np.ndarray | None:
    """Token ids of one record (special tokens added), cropped, dropped (None) or refused by `long_policy`
    (`LongPolicy.apply`, the policy pretraining's datasets follow), counted in `counts`."""
    ids = np.asarray(tokenizer.encode(sequence, record=record), np.int64)
    return LongPolicy(long_policy, max_length, tokenizer.special_ids).apply(ids, record, counts)


def content_mask(ids: torch.Tensor, attention_mask: torch.Tensor, tokenizer: Tokenizer) -> torch.Tensor:
    """Real tokens that are not special tokens: what sequence heads pool and token heads are scored on."""
    special = torch.tensor(sorted(tokenizer.special_ids), dtype=ids.dtype, device=ids.device)
    return attention_mask.bool() & ~torch.isin(ids, special)


def save_task_model(model: TaskModel, tokenizer: Tokenizer, info: TaskInfo, directory: Path,
                    train_config: dict[str, Any] | None = None, adapter: Path | None = None) -> Path:
    """Write the exported trunk, the head and task.json into a new `directory`, all or nothing; `adapter` (a LoRA
    adapter file written before the merge) is moved in with them."""
    head = {f"head.{k}": v for k, v in model.head.state_dict().items()}
    head.update(target_mean=model.target_mean, target_std=model.target_std)
    return save_pretrained(model.trunk, tokenizer, directory, train_config,
                           also_write=lambda staging: write_task_files(staging, info, head, adapter))


def load_task_model(source: str | Path) -> tuple[TaskModel, Tokenizer, TaskInfo]:
    """A fine-tuned model from its exported directory, or from the run directory that holds it (eval mode); every
    file is checked against its CRC-32 and task.json against the head (`read_task_files`) before it is used."""
    directory = Path(source)
    if (directory / MODEL_DIR / TASK_FILE).is_file():
        directory = directory / MODEL_DIR
    if not (directory / TASK_FILE).is_file():
        raise CheckpointError(f"{source} is not a fine-tuned model (no {TASK_FILE} in it or in its {MODEL_DIR}/); "
                              "train one with `python train.py experiment=finetune ...`")
    info, state = read_task_files(directory)
    trunk, tokenizer = load_exported(directory)
    try:
        model = TaskModel(trunk, info.task, info.n_outputs, pool=info.pool)
    except ConfigError as error:  # a pooling this trunk cannot use (cls on a causal model)
        raise CheckpointError(f"{directory / TASK_FILE}: {error}") from None
    try:
        model.head.load_state_dict({k[len("head."):]: v for k, v in state.items() if k.startswith("head.")})
    except RuntimeError as error:
        raise CheckpointError(f"{directory / HEAD_FILE} does not fit the trunk of {directory} "
                              f"({str(error).splitlines()[-1].strip()})") from None
    model.target_mean.copy_(state["target_mean"])
    model.target_std.copy_(state["target_std"])
    return model.eval(), tokenizer, info


@torch.no_grad()
def predict(model: TaskModel, tokenizer: Tokenizer, batch: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(predictions, scores) of a batch of encoded records: class ids and softmax probabilities (classification,
    token: per position), or values and values (regression)."""
    from biotf.data.collators import pad_batch

    if tokenizer.pad_id is None:
        raise ConfigError("tokenizer", tokenizer.kind, reason="batched prediction needs a tokenizer with a pad token")
    ids, attention = (torch.from_numpy(a) for a in pad_batch(batch, tokenizer.pad_id))
    out = model(ids, attention, content_mask(ids, attention, tokenizer))
    if model.task == "regression":
        return out.predictions.numpy(), out.predictions.numpy()
    return out.predictions.numpy(), torch.softmax(out.logits.float(), -1).numpy()
