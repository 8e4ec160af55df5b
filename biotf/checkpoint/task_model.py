"""A fine-tuned model on disk: the exported trunk, its task head and task.json, written and read as one.

A fine-tuning run exports `<run>/model/`: the trunk as any exported model (`save_pretrained`: config.json,
model.safetensors, tokenizer.json; LoRA adapters merged, so `biotf embed --model <run>/model` embeds with the
fine-tuned trunk), plus `task_head.safetensors` (the head and the regression target scale) and `task.json`
(task, class names, pooling, max_length, long_policy). With LoRA the adapter alone is kept as
`adapter.safetensors` too (`biotf.model.lora.load_adapter` puts it back onto the base model).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from biotf.checkpoint import FINETUNED_MODEL_DIR as MODEL_DIR
from biotf.checkpoint import TASK_FILE, save_pretrained
from biotf.errors import CheckpointError
from biotf.checkpoint.loading import load_pretrained
from biotf.model.tasks import TaskModel
from biotf.tokenizers.base import Tokenizer

HEAD_FILE = "task_head.safetensors"
ADAPTER_FILE = "adapter.safetensors"


@dataclass
class TaskInfo:
    task: str
    classes: list[str] | None  # class names by index (classification, token); None for regression
    pool: str
    max_length: int
    long_policy: str
    label_column: str | None = None

    @property
    def n_outputs(self) -> int:
        return 1 if self.classes is None else len(self.classes)


def save_task_model(model: TaskModel, tokenizer: Tokenizer, info: TaskInfo, directory: Path,
                    train_config: dict[str, Any] | None = None, adapter: Path | None = None) -> Path:
    """Write the exported trunk, the head and task.json into a new `directory`, all or nothing; `adapter` (a LoRA
    adapter file written before the merge) is moved in with them."""
    from safetensors.torch import save_file

    def write_head(staging: Path) -> None:
        head = {f"head.{k}": v.contiguous() for k, v in model.head.state_dict().items()}
        head.update(target_mean=model.target_mean.contiguous(), target_std=model.target_std.contiguous())
        save_file(head, str(staging / HEAD_FILE))
        (staging / TASK_FILE).write_text(json.dumps(asdict(info), indent=2) + "\n", encoding="utf-8")
        if adapter is not None:
            adapter.replace(staging / ADAPTER_FILE)

    return save_pretrained(model.trunk, tokenizer, directory, train_config, also_write=write_head)


def load_task_model(source: str | Path,
                    tokenizer_options: Mapping[str, Any] | None = None) -> tuple[TaskModel, Tokenizer, TaskInfo]:
    """A fine-tuned model from its exported directory, or from the run directory that holds it (eval mode);
    `tokenizer_options` change policies of its tokenizer (`load_pretrained`)."""
    from safetensors.torch import load_file

    directory = Path(source)
    if (directory / MODEL_DIR / TASK_FILE).is_file():
        directory = directory / MODEL_DIR
    if not (directory / TASK_FILE).is_file():
        raise CheckpointError(f"{source} is not a fine-tuned model (no {TASK_FILE} in it or in its {MODEL_DIR}/); "
                              "train one with `python train.py experiment=finetune ...`")
    info = TaskInfo(**json.loads((directory / TASK_FILE).read_text(encoding="utf-8")))
    trunk, tokenizer = load_pretrained(directory, tokenizer_options=tokenizer_options)
    model = TaskModel(trunk, info.task, info.n_outputs, pool=info.pool)
    state = load_file(str(directory / HEAD_FILE))
    model.head.load_state_dict({k[len("head."):]: v for k, v in state.items() if k.startswith("head.")})
    model.target_mean.copy_(state["target_mean"])
    model.target_std.copy_(state["target_std"])
    return model.eval(), tokenizer, info
