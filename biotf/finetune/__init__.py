"""Fine-tuning: a task head on a pretrained trunk, trained on labelled records (`python train.py experiment=finetune`).

- the `finetune` node of the training config (mode, head, pooling, split, LoRA) is `biotf.training.finetune_config`,
  and the modes (full | frozen | lora) are `biotf.model.modes`: the training schema checks both, below this package;
- `labelled`: records and their labels in the task's form; `batches`: their batches and the resumable loader;
- `task_module`: the LightningModule around a `TaskModel`; `task_metrics`: the task's metrics;
- `results`: predictions_test.tsv and finetune.json; `finetune_run`: `train_task`, the run from data to export.

Runs share pretraining's machinery (`biotf.training`: trainer, run directory, stop and resume); the fine-tuned model's
file format is `biotf.checkpoint.task_model`.
"""
