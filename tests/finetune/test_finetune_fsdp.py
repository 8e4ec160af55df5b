"""Fine-tuning under `trainer.strategy=fsdp` (FSDP2) on 2 CPU processes over gloo: full and frozen fine-tuning equal
DDP's; LoRA (a frozen base and trainable adapters in one sharded block) trains, stops and resumes exactly from its
sharded checkpoint, and ends as the ordinary export, adapters merged, whose predictions are those of its weights read
back."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from biotf.cli import main as biotf_main
from biotf.entry import train as entry
from torchrun_helpers import SEVERAL_PROCESSES
from training_helpers import finetune_overrides, finish, start_script, stop_once_sharded

# float32: DDP all-reduces whole gradients, FSDP2 reduce-scatters their shards; the same sums added in another order
# (measured: weights within 2e-8 after 8 steps here).
TOL = 1e-5
LORA_STEPS = 20


def overrides(pretrained, run_dir, *extra):
    return finetune_overrides(pretrained, "trainer.accelerator=cpu", "trainer.devices=2", "trainer.log_every_n_steps=1",
                              "optim.warmup_steps=2", *extra, f"hydra.run.dir={run_dir}")


def finished_cleanly(process) -> str:
    """The process's stderr, once it exited 0 with no Lightning notice of a metric or tensor misuse."""
    result = finish(process, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "sync_dist" not in result.stderr and "view tensor" not in result.stderr, result.stderr[-3000:]
    return result.stderr


def fine_tune(pretrained, *runs: tuple[Path, list[str]]) -> list[tuple[Path, str]]:
    """Each (run directory, overrides) fine-tuned, all side by side (`start_script`); their directories and stderr."""
    started = [start_script(overrides(pretrained, run_dir, *extra), cwd=run_dir.parent) for run_dir, extra in runs]
    return [(run_dir, finished_cleanly(process)) for (run_dir, _), process in zip(runs, started)]


def checkpoint(run_dir, name="last.ckpt"):
    path = run_dir / "checkpoints" / name
    assert path.is_file()  # consolidated at the end: the single file every command reads
    return torch.load(path, map_location="cpu", weights_only=True)


def train_losses(run_dir) -> np.ndarray:
    import pandas as pd

    metrics = pd.read_csv(run_dir / "metrics.csv")
    return metrics.dropna(subset=["train/loss"]).sort_values("step")["train/loss"].to_numpy()


def assert_same_state(actual, expected, atol):
    assert actual["global_step"] == expected["global_step"]
    assert set(actual["state_dict"]) == set(expected["state_dict"])
    for name, value in expected["state_dict"].items():
        torch.testing.assert_close(actual["state_dict"][name], value, rtol=0, atol=atol, msg=name)
    for index, moments in expected["optimizer_states"][0]["state"].items():
        for key, value in moments.items():
            torch.testing.assert_close(actual["optimizer_states"][0]["state"][index][key], value, rtol=0, atol=atol)


@SEVERAL_PROCESSES
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["full", "frozen"])  # frozen: the head on cached features, the trunk never gathered
def test_fine_tuning_under_fsdp_equals_ddp(pretrained, tmp_path, mode):
    common = ["data.label_column=label", "trainer.max_steps=8", "trainer.val_check_interval=4", f"finetune.mode={mode}"]
    (fsdp, fsdp_err), (ddp, ddp_err) = fine_tune(pretrained, (tmp_path / "fsdp", [*common, "trainer.strategy=fsdp"]),
                                                 (tmp_path / "ddp", [*common, "trainer.strategy=ddp"]))
    if mode == "frozen":  # every rank computes the trunk's features; rank 0 alone says so
        assert [err.count("trunk features of") for err in (fsdp_err, ddp_err)] == [1, 1], fsdp_err[-3000:]
    assert len(train_losses(fsdp)) == 8
    np.testing.assert_allclose(train_losses(fsdp), train_losses(ddp), rtol=0, atol=TOL)
    assert_same_state(checkpoint(fsdp), checkpoint(ddp), TOL)
    summaries = [json.loads((run / "finetune.json").read_text()) for run in (fsdp, ddp)]
    assert summaries[0]["split"] == summaries[1]["split"] and summaries[0]["steps"] == 8
    for key in ("validation", "test"):
        assert summaries[0][key] == pytest.approx(summaries[1][key], abs=1e-4)
    # the export: the trunk and head of the best checkpoint, as a one-process run writes it
    trunk = load_file(str(fsdp / "model" / "model.safetensors"))
    best = checkpoint(fsdp, "best.ckpt")["state_dict"]
    assert all(torch.equal(value, best[f"model.trunk.{name}"]) for name, value in trunk.items())


def read_tsv(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def predictions_of_weights(pretrained, state_dict, records):
    """Regression predictions of a fresh LoRA model (adapters not merged) holding `state_dict`, record by record."""
    from biotf.checkpoint.loading import load_pretrained
    from biotf.data.collators import content_mask
    from biotf.model.lora import apply_lora
    from biotf.model.heads import TaskModel

    trunk, tokenizer = load_pretrained(pretrained / "base")
    apply_lora(trunk, ["qkv", "out"], rank=8, alpha=16.0)
    model = TaskModel(trunk, "regression", 1)
    model.load_state_dict({name[len("model."):]: value for name, value in state_dict.items()})
    model.eval()
    predicted = {}
    with torch.no_grad():
        for identifier, sequence in records:
            ids = torch.tensor([tokenizer.encode(sequence)])
            attention = torch.ones_like(ids)
            predicted[identifier] = float(model(ids, attention, content_mask(ids, attention, tokenizer)).predictions)
    return predicted


@SEVERAL_PROCESSES
@pytest.mark.slow
def test_lora_under_fsdp_trains_resumes_exactly_and_its_merged_export_predicts_as_its_weights(pretrained, tmp_path):
    common = ["data.label_column=value", "task=regression", "finetune.mode=lora", "finetune.monitor=spearman",
              f"trainer.max_steps={LORA_STEPS}", "trainer.val_check_interval=5", "trainer.checkpoint_every_n_steps=2",
              "trainer.strategy=fsdp"]
    # the run stopped by SIGTERM below starts beside the uninterrupted one (it depends on nothing of it)
    stopped = tmp_path / "stopped"
    process = start_script(overrides(pretrained, stopped, *common), cwd=tmp_path)
    last = stopped / "checkpoints" / "last.ckpt"
    uninterrupted = start_script(overrides(pretrained, tmp_path / "lora", *common), cwd=tmp_path)
    stop_once_sharded(process, last)
    finished_cleanly(uninterrupted)
    run = tmp_path / "lora"
    losses = train_losses(run)
    assert len(losses) == LORA_STEPS and losses[-5:].mean() < losses[:5].mean(), losses
    summary = json.loads((run / "finetune.json").read_text())
    assert summary["test"]["spearman"] > 0.3, summary["test"]
    # the base stayed as it was, the adapters trained
    best = checkpoint(run, "best.ckpt")["state_dict"]
    base = load_file(str(pretrained / "base" / "model.safetensors"))
    assert all(torch.equal(best[f"model.trunk.{name}"], value) for name, value in base.items())
    assert all(best[name].abs().max() > 0 for name in best if name.endswith("lora_b"))

    # the export merges them: `biotf predict` on it predicts what the unmerged weights of best.ckpt predict
    with open(pretrained / "labelled.csv", newline="") as handle:
        records = [(row["id"], row["sequence"]) for row in csv.DictReader(handle)][:40]
    expected = predictions_of_weights(pretrained, best, records)
    output = tmp_path / "predictions.tsv"
    assert biotf_main(["predict", "--model", str(run), "--input", str(pretrained / "labelled.csv"), "--id-column",
                       "id", "--output", str(output)]) == 0
    predicted = {row["id"]: float(row["prediction"]) for row in read_tsv(output)}
    for identifier, value in expected.items():
        assert predicted[identifier] == pytest.approx(value, rel=1e-5, abs=1e-5), identifier

    # stopped by SIGTERM after a sharded checkpoint, resumed from it: the uninterrupted run's weights, moments, losses
    ((resumed, _),) = fine_tune(pretrained, (tmp_path / "resumed", [*common, f"ckpt_path={last}"]))
    assert_same_state(checkpoint(resumed), checkpoint(run), atol=1e-7)
    step = len(losses) - len(train_losses(resumed))
    assert 2 <= step < LORA_STEPS
    np.testing.assert_allclose(train_losses(resumed), losses[step:], rtol=0, atol=1e-7)


def test_muon_under_fsdp_is_refused_for_fine_tuning_in_one_line(pretrained, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert entry.main(overrides(pretrained, tmp_path / "run", "data.label_column=label", "trainer.strategy=fsdp",
                                "optim=muon")) == 2
    err = capsys.readouterr().err
    assert err.split(": error: ")[1] == ("invalid config optim.optimizer='muon': trainer.strategy=fsdp splits each "
                                         "weight matrix across ranks, and Muon orthogonalises whole matrices "
                                         "(allowed: adamw)\n"), err
    assert not (tmp_path / "run").exists()
