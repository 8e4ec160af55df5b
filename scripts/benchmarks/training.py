"""Training section: what Lightning costs, and whether the data loader keeps up with training.

- Lightning overhead: the LightningModule's training step inside `Trainer.fit` (data fetch, hooks,
  metrics, logging, clipping, schedule) against a plain PyTorch loop doing the same optimisation
  (forward, backward, clip to 1.0, AdamW, LR schedule) on an identical model and the same 8 x 256
  batch. The two alternate step by step: a callback runs one plain step between Lightning steps, so
  machine drift hits both. Target: Lightning at most 3% slower (ratio >= 0.97).
- Data loader vs training step: batches from the training DataModule's own loader (the default
  run's data, crop 256, masking, padding) against the training step on a full batch of the same
  shape; tokens per second of each. Target: the loader at least 20x faster than the step.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

BATCH, LENGTH = 8, 256
REPO = Path(__file__).resolve().parents[2]


def _task_and_plain(total_steps: int):
    import torch

    from biotf.model import Transformer, TransformerConfig
    from biotf.model.loss import language_model_loss
    from biotf.tokenizers import build_tokenizer
    from biotf.training.train_config import OptimConfig
    from biotf.training.module import LanguageModelTask
    from biotf.training.optim import build_optimizer

    tokenizer = build_tokenizer({"kind": "protein"})
    config = TransformerConfig.preset("protein-small", vocab_size=tokenizer.vocab_size)
    torch.manual_seed(0)
    task = LanguageModelTask(config, tokenizer, OptimConfig(), total_steps)
    plain = Transformer(config)
    plain.load_state_dict(task.model.state_dict())
    optimizer, scheduler = build_optimizer(plain, OptimConfig(), total_steps)

    def plain_step(batch):  # the loss as the LightningModule computes it (fused head + loss)
        loss = language_model_loss(plain, batch["input_ids"], batch["labels"], batch.get("attention_mask"),
                                   fused=True).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(plain.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)

    return tokenizer, task, plain_step


def lightning_overhead(bench, quick: bool) -> None:
    import lightning as L
    import torch

    steps = 12 if quick else 40
    tokenizer, task, plain_step = _task_and_plain(steps + 1)
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(4, 24, (BATCH, LENGTH), generator=generator)
    labels = torch.where(torch.rand(BATCH, LENGTH, generator=generator) < 0.15, input_ids, -100)
    batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}
    loader = torch.utils.data.DataLoader([batch] * (steps + 1), batch_size=None)  # the same batch every step

    class Alternate(L.Callback):
        """Times each Lightning step from the end of the previous plain step; runs one plain step in between."""

        def __init__(self):
            self.lightning, self.plain, self.resumed = [], [], None

        def on_train_batch_end(self, trainer, pl_module, outputs, batch_, batch_idx):
            now = time.perf_counter()
            if self.resumed is not None:
                self.lightning.append(now - self.resumed)
            start = time.perf_counter()
            plain_step(batch)
            self.plain.append(time.perf_counter() - start)
            self.resumed = time.perf_counter()

    alternate = Alternate()
    with tempfile.TemporaryDirectory(prefix="biotf-bench-training-") as tmp:
        trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=steps + 1, gradient_clip_val=1.0,
                            logger=L.pytorch.loggers.CSVLogger(tmp, name="", version=""), log_every_n_steps=10,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                            num_sanity_val_steps=0, limit_val_batches=0, callbacks=[alternate])
        trainer.fit(task, train_dataloaders=loader)
    warm = 2  # the first steps pay for allocation on both sides
    lightning, plain = alternate.lightning[warm:], alternate.plain[warm + 1:]
    ratio = statistics.median(p / q for p, q in zip(plain, lightning))
    tokens = BATCH * LENGTH
    bench.record(f"plain PyTorch step (protein-small, {BATCH} x {LENGTH})", tokens / statistics.median(plain),
                 "tokens/s")
    bench.record("LightningModule step in Trainer.fit (same model and batch)", tokens / statistics.median(lightning),
                 "tokens/s")
    bench.record("Lightning speed relative to plain loop (plain time / Lightning time)", ratio, "x",
                 target=">= 0.97 (at most 3% slower)", note=f"median of {len(lightning)} alternating pairs")


def loader_vs_step(bench, quick: bool) -> None:
    from hydra import compose, initialize_config_dir

    from biotf.conventions import CONF_DIR
    from biotf.training.train_config import register_configs, validate
    from biotf.training.datamodule import SequenceDataModule
    from biotf.training.run import build_run_tokenizer, prepare_data

    register_configs()
    with tempfile.TemporaryDirectory(prefix="biotf-bench-loader-") as tmp:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            config = validate(compose(config_name="config", overrides=[f"data.cache_dir={tmp}"]))
        tokenizer = build_run_tokenizer(config, resumed=None)
        prepared = prepare_data(config, tokenizer)
        datamodule = SequenceDataModule(prepared, tokenizer, config.data, config.seed)

        def batches():
            while True:
                yield from datamodule.train_dataloader()

        stream = batches()
        _, task, plain_step = _task_and_plain(1000)
        shape = (config.data.batch_size, config.data.max_length)
        full = next(b for b in stream if tuple(b["input_ids"].shape) == shape)
        bench.compare(f"training loader batch vs training step (default run data, {shape[0]} x {shape[1]})",
                      lambda: next(stream), lambda: plain_step(full), anchor_name="training step", unit="tokens",
                      work=shape[0] * shape[1], repeats=5 if quick else 11, target=20.0)


def run(bench, quick: bool) -> None:
    import torch

    torch.set_num_threads(2)
    lightning_overhead(bench, quick)
    loader_vs_step(bench, quick)
