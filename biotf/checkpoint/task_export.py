"""A fine-tuned export's own files beside its trunk, each covered by a CRC-32 as the trunk's weights are.

A fine-tuning run's `<run>/model/` is an exported trunk (`save_pretrained`: config.json records the CRC-32 of
model.safetensors, tokenizer.json is checked by its fingerprint) plus:
- task_head.safetensors: the head's weights and the regression target scale (the standardisation statistics);
- adapter.safetensors (LoRA runs): the adapter alone;
- task.json: task, class names, pooling, max_length, long_policy, label_column (`TaskInfo`); `files`, the CRC-32 of
  each file above (of its bytes: safetensors' header, and so LoRA's rank and alpha, included); `biotf_crc32`, the
  CRC-32 of task.json's own content (`content_crc32` of every other key).

`read_task_files` checks all of it, and the type and value of every task.json field, before any weights are used:
each problem is one line naming the file. task.json's keys are exactly these: an unknown key is refused, not ignored.
An export written before task.json carried CRC-32s (no `biotf_crc32`) still loads, with a warning that its head is
unchecked: re-exporting it would need its run's checkpoints, which a copied model/ directory may not come with.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from biotf.checkpoint.digest import DIGEST_KEY, content_crc32
from biotf.checkpoint.format import TASK_FILE
from biotf.data.long_policy import TRAINING_LONG_POLICIES
from biotf.errors import CheckpointError
from biotf.model.heads import RESOLUTIONS, SEQUENCE_POOLS, TASKS
from biotf.untrusted import check_finite, file_crc32, read_safetensors

HEAD_FILE = "task_head.safetensors"
ADAPTER_FILE = "adapter.safetensors"
FILES_KEY = "files"  # task.json: {file name: CRC-32 of its bytes}
HEAD_KEYS = ("head.weight", "head.bias", "target_mean", "target_std")


@dataclass
class TaskInfo:
    """What task.json says about the head: its task, class names by index (classification, token; None for
    regression), pooling, and how inputs are encoded (max_length, long_policy) as in training."""

    task: str
    classes: list[str] | None
    pool: str
    max_length: int
    long_policy: str
    label_column: str | None = None
    resolution: str = "base"  # a token head's: base | bin (one prediction per bin of a stem model)

    @property
    def n_outputs(self) -> int:
        return 1 if self.classes is None else len(self.classes)


def write_task_files(staging: Path, info: TaskInfo, head: dict[str, torch.Tensor], adapter: Path | None) -> None:
    """Write the head, move `adapter` in (a LoRA adapter file written before the merge), then task.json with the
    CRC-32 of each and of itself, into `staging` (an export's all-or-nothing staging directory)."""
    from safetensors.torch import save_file

    save_file({name: tensor.contiguous() for name, tensor in head.items()}, str(staging / HEAD_FILE))
    if adapter is not None:
        adapter.replace(staging / ADAPTER_FILE)
    files = {name: file_crc32(staging / name) for name in (HEAD_FILE, ADAPTER_FILE) if (staging / name).is_file()}
    content = {**asdict(info), FILES_KEY: files}
    (staging / TASK_FILE).write_text(json.dumps({**content, DIGEST_KEY: content_crc32(content)}, indent=2) + "\n",
                                     encoding="utf-8")


def _damaged(path: Path, actual: int, expected: int) -> CheckpointError:
    return CheckpointError(f"{path} is damaged: its content has CRC-32 {actual:08x}, it was written with "
                           f"{expected:08x} (copy the export again, or retrain)")


def _shown(value: Any) -> str:
    """A value as a message shows it: its repr, cut short (a crafted file's values may be huge or deeply nested)."""
    try:
        text = repr(value)
    except RecursionError:
        return "<nested too deeply>"
    return text if len(text) <= 80 else text[:77] + "..."


def _read_task_json(path: Path) -> tuple[dict[str, Any], bool]:
    """task.json's content without its CRC-32, and whether it had one (which then matched)."""
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as error:  # not UTF-8 or not JSON (ValueError), nested beyond reading
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise CheckpointError(f"{path} is not valid JSON ({reason})") from None
    if not isinstance(values, dict):
        raise CheckpointError(f"{path} holds a JSON {type(values).__name__}, not an object of task fields")
    if DIGEST_KEY not in values:
        return values, False
    expected = values.pop(DIGEST_KEY)
    if isinstance(expected, bool) or not isinstance(expected, int):
        raise CheckpointError(f"{path}: {DIGEST_KEY}={_shown(expected)} (allowed: a CRC-32)")
    try:
        actual = content_crc32(values)
    except RecursionError:
        raise CheckpointError(f"{path}: values nested too deeply to be task fields") from None
    if actual != expected:
        raise _damaged(path, actual, expected)
    return values, True


def _task_info(values: dict[str, Any], path: Path) -> TaskInfo:
    """The TaskInfo task.json describes; a missing, unknown or ill-typed field is refused naming the file."""
    fields = [field.name for field in dataclasses.fields(TaskInfo)]
    required = [field.name for field in dataclasses.fields(TaskInfo) if field.default is dataclasses.MISSING]
    unknown = [key for key in values if key not in fields]
    if unknown:
        raise CheckpointError(f"{path}: unknown key {_shown(unknown[0])} (allowed: {', '.join(fields)}, "
                              f"{FILES_KEY}, {DIGEST_KEY})")
    missing = [name for name in required if name not in values]
    if missing:
        raise CheckpointError(f"{path}: no {missing[0]!r}")

    def refuse(key: str, allowed: str) -> CheckpointError:
        return CheckpointError(f"{path}: {key}={_shown(values[key])} (allowed: {allowed})")

    task, classes, max_length = values["task"], values["classes"], values["max_length"]
    if task not in TASKS:
        raise refuse("task", " | ".join(TASKS))
    if task == "regression" and classes is not None:
        raise refuse("classes", "null for task=regression")
    named = isinstance(classes, list) and all(isinstance(c, str) for c in classes)
    if task != "regression" and not (named and len(classes) >= 2 and len(set(classes)) == len(classes)):
        raise refuse("classes", f"a list of two or more distinct class names for task={task}")
    if values["pool"] not in SEQUENCE_POOLS:
        raise refuse("pool", " | ".join(SEQUENCE_POOLS))
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 2:
        raise refuse("max_length", "an integer >= 2")
    if values["long_policy"] not in TRAINING_LONG_POLICIES:
        raise refuse("long_policy", " | ".join(TRAINING_LONG_POLICIES))
    if not isinstance(values.get("label_column"), (str, type(None))):
        raise refuse("label_column", "a column name, or null")
    if values.get("resolution", "base") not in RESOLUTIONS:
        raise refuse("resolution", " | ".join(RESOLUTIONS))
    return TaskInfo(**values)


def _check_files(directory: Path, files: Any) -> None:
    """Every file task.json lists is there with the CRC-32 it was written with."""
    path = directory / TASK_FILE
    if not (isinstance(files, dict) and HEAD_FILE in files and set(files) <= {HEAD_FILE, ADAPTER_FILE}
            and all(isinstance(v, int) and not isinstance(v, bool) for v in files.values())):
        raise CheckpointError(f"{path}: {FILES_KEY}={_shown(files)} (allowed: {{file name: CRC-32}} of {HEAD_FILE} "
                              f"and, with LoRA, {ADAPTER_FILE})")
    for name, expected in files.items():
        if not (directory / name).is_file():
            raise CheckpointError(f"fine-tuned model directory {directory} has no {name} (listed in {TASK_FILE})")
        actual = file_crc32(directory / name)
        if actual != expected:
            raise _damaged(directory / name, actual, expected)


def _read_head(path: Path, info: TaskInfo) -> dict[str, torch.Tensor]:
    """The head's tensors, which must be those of a head with `info.n_outputs` outputs."""
    if not path.is_file():
        raise CheckpointError(f"fine-tuned model directory {path.parent} has no {path.name}")
    state = read_safetensors(path, "the head")
    check_finite(state.items(), path)
    if sorted(state) != sorted(HEAD_KEYS):
        raise CheckpointError(f"{path}: tensors {sorted(state)}, a task head has {list(HEAD_KEYS)}")
    n = info.n_outputs
    shapes = {name: tuple(tensor.shape) for name, tensor in state.items()}
    if (len(shapes["head.weight"]) != 2 or shapes["head.weight"][0] != n
            or any(shapes[name] != (n,) for name in HEAD_KEYS[1:])):
        what = f"{n} classes" if info.classes is not None else "1 value (regression)"
        raise CheckpointError(f"{path}: the head has shapes {shapes}, but {TASK_FILE} describes {what}")
    return state


def read_task_files(directory: str | Path) -> tuple[TaskInfo, dict[str, torch.Tensor]]:
    """task.json and the head of the fine-tuned export `directory`, every file checked (see the module docstring)."""
    directory = Path(directory)
    path = directory / TASK_FILE
    values, checked = _read_task_json(path)
    if checked:
        _check_files(directory, values.pop(FILES_KEY, None))
    else:
        warnings.warn(f"{path} records no CRC-32s (written before fine-tuned exports carried them): its head and "
                      "task.json are loaded unchecked", stacklevel=2)
    info = _task_info(values, path)
    return info, _read_head(directory / HEAD_FILE, info)
