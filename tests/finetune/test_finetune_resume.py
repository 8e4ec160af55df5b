"""A fine-tuning run has a language-model run's guarantees: its run directory is locked, last.ckpt is written by
wall time and at the end (an early stop too), and SIGTERM saves, exits 143 naming the resume command, which then
lands on the uninterrupted run's weights and results exactly and counts the training time before the stop."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from biotf.entry import train as entry
from biotf.training import callbacks
from biotf.finetune.task_module import TaskModule
from biotf.finetune.finetune_run import train_task
from biotf.training.rundir import RunDirectoryError
from forked_process import run_forked
from training_helpers import REPO, finetune_config, finetune_overrides

STEPS = 30

def terminated_at(n: int, args: list[str]) -> int:
    """train.py's entry point, sending itself SIGTERM as a scheduler would, as optimizer step N+1 begins. Run in a
    forked process (`forked_process`): the patch stays in the child."""
    step = TaskModule.training_step

    def training_step(self, batch, batch_idx):
        if self.global_step == n:
            os.kill(os.getpid(), signal.SIGTERM)
        return step(self, batch, batch_idx)
    TaskModule.training_step = training_step
    return entry.main(args, script=str(REPO / "train.py"))


def last(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


@pytest.mark.slow
def test_sigterm_saves_stops_and_resumes_in_place_exactly(pretrained, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # Dropout in the head, so the RNG state must travel; 12 batches an epoch, so the resume is mid-epoch.
    common = finetune_overrides(pretrained, "data.label_column=label", f"trainer.max_steps={STEPS}",
                                "finetune.head_dropout=0.2")
    run_dir = tmp_path / "run"
    stopped = run_forked(terminated_at, 12, [*common, f"hydra.run.dir={run_dir}"])
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    message = stopped.stderr.strip().splitlines()[-1]
    assert message.startswith(f"train: stopped by SIGTERM at step 13; saved {checkpoint}; resume with: python ")
    assert message.endswith(f"ckpt_path={checkpoint}") and "Traceback" not in stopped.stderr
    stopped_at = last(run_dir)
    assert stopped_at["global_step"] == 13 and stopped_at[callbacks.PROGRESS_KEY]["train_seconds"] > 0
    assert not (run_dir / "finetune.json").exists() and not (run_dir / "model").exists()
    assert not (run_dir / "run.lock").exists()

    # The printed command, as a user pastes it: no hydra.run.dir, so the run continues in its own directory.
    # A stopped clock from here on: the resumed run's training time is then the time before the stop.
    monkeypatch.setattr(callbacks.TrainingTime, "clock", staticmethod(lambda: 0.0))
    assert entry.main([*common, f"ckpt_path={checkpoint}"]) == 0
    reference_dir = tmp_path / "uninterrupted"
    assert entry.main([*common, f"hydra.run.dir={reference_dir}"]) == 0
    resumed, reference = last(run_dir), last(reference_dir)
    assert resumed["global_step"] == reference["global_step"] == STEPS
    for name, value in reference["state_dict"].items():
        assert torch.equal(resumed["state_dict"][name], value), name
    results = [json.loads((d / "finetune.json").read_text()) for d in (run_dir, reference_dir)]
    assert results[0]["validation"] == results[1]["validation"] and results[0]["test"] == results[1]["test"]
    assert (run_dir / "predictions_test.tsv").read_text() == (reference_dir / "predictions_test.tsv").read_text()
    assert results[0]["train_seconds"] == stopped_at[callbacks.PROGRESS_KEY]["train_seconds"]


def test_a_finished_run_is_not_resumed_over_its_export(pretrained, tmp_path):
    cfg = finetune_config(pretrained, "data.label_column=label", "trainer.max_steps=2")
    train_task(cfg, tmp_path)
    resume = finetune_config(pretrained, "data.label_column=label", "trainer.max_steps=4",
                             f"ckpt_path={tmp_path / 'checkpoints' / 'last.ckpt'}")
    with pytest.raises(RunDirectoryError, match="already holds a finished fine-tuning run"):
        train_task(resume, tmp_path)


def hashes(directory: Path) -> dict[str, str]:
    """Every file under `directory` (Hydra's .hydra/ too) by its path, with the SHA-256 of its bytes."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def test_a_resume_that_would_train_on_another_split_is_refused(pretrained, tmp_path, monkeypatch, capsys):
    """The same settings on a data file whose records changed since (a changed seed or split setting is refused
    before, by test_a_resume_with_other_settings_is_refused_and_changes_nothing): `train.py ckpt_path=...` in place
    is refused inside its job, after Hydra composed its files, and every byte of the run directory (its split.tsv,
    Hydra's .hydra/) is left as it was; on the data as it was, the resume continues the run."""
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "labelled.csv"
    shutil.copy(pretrained / "labelled.csv", data)
    run = tmp_path / "run"
    assert entry.main(finetune_overrides(pretrained, "data.label_column=label", "trainer.max_steps=2",
                                         f"data.path={data}", f"hydra.run.dir={run}")) == 0
    shutil.rmtree(run / "model")  # as a run stopped before its export
    before = hashes(run)
    original = data.read_text()
    data.write_text("".join(original.splitlines(keepends=True)[:-40]))  # 40 records fewer
    resume = finetune_overrides(pretrained, "data.label_column=label", "trainer.max_steps=4", f"data.path={data}",
                                f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    capsys.readouterr()
    assert entry.main(resume) == 2
    assert re.search(r"error: resuming: \d+ records would change sides against .*split.tsv", capsys.readouterr().err)
    assert hashes(run) == before
    data.write_text(original)
    assert entry.main(resume) == 0
    assert json.loads((run / "finetune.json").read_text())["steps"] == 4


def test_a_resume_with_other_settings_is_refused_and_changes_nothing(pretrained, tmp_path, monkeypatch, capsys):
    """It rewrote config.yaml and .hydra/, then crashed with a 36-line traceback."""
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    assert entry.main(finetune_overrides(pretrained, "data.label_column=label", "trainer.max_steps=2",
                                         f"hydra.run.dir={run}")) == 0
    shutil.rmtree(run / "model")  # as a run stopped before its export
    before = hashes(run)
    assert ".hydra/config.yaml" in before and "config.yaml" in before
    checkpoint = run / "checkpoints" / "last.ckpt"
    capsys.readouterr()
    # The printed resume command (no hydra.run.dir: in place), edited: another task, label column, mode and monitor.
    assert entry.main(finetune_overrides(pretrained, "data.label_column=value", "task=regression",
                                         "finetune.mode=lora", "finetune.monitor=rmse", "trainer.max_steps=4",
                                         f"ckpt_path={checkpoint}")) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert (f"error: resuming {checkpoint} with settings that differ from its run's {run / 'config.yaml'}: "
            "data.label_column ('label' -> 'value'), finetune.mode ('full' -> 'lora'), finetune.monitor ('loss' -> "
            "'rmse'), task ('classification' -> 'regression'); resume with the run's settings (a resume may change "
            "only ") in err, err
    assert hashes(run) == before
    with pytest.raises(RunDirectoryError, match=r"differ from its run's .*: seed \(0 -> 1\); "):
        train_task(finetune_config(pretrained, "data.label_column=label", "trainer.max_steps=4", "seed=1",
                                   f"ckpt_path={checkpoint}"), run)
    assert hashes(run) == before
    # What a resume may change (rundir.RESUMABLE): how long, how often it saves and logs, on what hardware.
    assert entry.main(finetune_overrides(pretrained, "data.label_column=label", "trainer.max_steps=4",
                                         "trainer.checkpoint_every_minutes=5", "trainer.log_every_n_steps=2",
                                         "trainer.gradient_checkpointing=true", f"ckpt_path={checkpoint}")) == 0
    assert json.loads((run / "finetune.json").read_text())["steps"] == 4


def test_a_resume_into_another_directory_keeps_the_runs_best_checkpoint(pretrained, tmp_path, recwarn):
    """Lightning dropped the best score when the directory changed ("best_model_score won't be reloaded"), and the
    resumed run exported a worse "best" model than the run it continued."""
    from biotf.checkpoint import read_checkpoint
    from biotf.errors import CheckpointError

    # Learning rates too small to change a prediction: accuracy never improves on the first validation's (step 2).
    settings = ("data.label_column=label", "optim.lr=1e-12", "finetune.trunk_lr=1e-12", "finetune.monitor=accuracy",
                "trainer.val_check_interval=2")
    first, second = tmp_path / "first", tmp_path / "second"
    assert train_task(finetune_config(pretrained, *settings, "trainer.max_steps=4"), first).best_step == 2
    before = hashes(first)
    recwarn.clear()
    last_checkpoint = f"ckpt_path={first / 'checkpoints' / 'last.ckpt'}"
    summary = train_task(finetune_config(pretrained, *settings, "trainer.max_steps=8", last_checkpoint), second)
    assert summary.steps == 8 and summary.best_step == 2  # validations at 6 and 8 did not beat step 2's
    assert summary.best_checkpoint == str(second / "checkpoints" / "best.ckpt")
    assert read_checkpoint(second / "checkpoints" / "best.ckpt")["global_step"] == 2  # copied into the new run
    assert not [w for w in recwarn if "won't be reloaded" in str(w.message)], [str(w.message) for w in recwarn]
    assert hashes(first) == before  # the run it continued is left as it was
    # A best checkpoint that is nowhere to be found is refused before anything is written.
    (first / "checkpoints" / "best.ckpt").unlink()
    with pytest.raises(CheckpointError, match=r"records the best checkpoint .*best.ckpt \(score 0.\d+\), which is "
                                              r"gone"):
        train_task(finetune_config(pretrained, *settings, "trainer.max_steps=8", last_checkpoint), tmp_path / "third")
    assert list((tmp_path / "third").iterdir()) == []


def test_a_run_directory_in_use_is_refused(pretrained, tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "run.lock").write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname()}))
        with pytest.raises(RunDirectoryError, match=f"in use by process {holder.pid}"):
            train_task(finetune_config(pretrained, "data.label_column=label"), tmp_path)
    finally:
        holder.kill()
        holder.wait()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.lock"]


def test_last_checkpoint_by_wall_time(pretrained, tmp_path, saves, monkeypatch):
    clock = iter(range(0, 10**6, 20))  # every read of the clock is 20 s later: 30 s are due every other read
    monkeypatch.setattr(callbacks.RunControl, "clock", staticmethod(lambda: float(next(clock))))
    train_task(finetune_config(pretrained, "data.label_column=label", "trainer.max_steps=6",
                               "trainer.val_check_interval=100", "trainer.checkpoint_every_n_steps=1000",
                               "trainer.checkpoint_every_minutes=0.5"), tmp_path)
    assert saves[-1] == 6 and len(saves) >= 3 and saves == sorted(set(saves)), saves


def test_an_early_stop_ends_with_last_checkpoint_at_its_final_step(pretrained, tmp_path, saves):
    # Learning rates too small to change any prediction: accuracy never improves, patience 1 stops at the 2nd check.
    summary = train_task(finetune_config(pretrained, "data.label_column=label", "optim.lr=1e-12",
                                         "finetune.trunk_lr=1e-12", "finetune.monitor=accuracy",
                                         "finetune.patience=1", "trainer.val_check_interval=2",
                                         "trainer.checkpoint_every_n_steps=1000"), tmp_path)
    assert summary.steps == 4 and saves == [3, 4]  # after the first validation, then the early stop's final step
    assert last(tmp_path)["global_step"] == 4
