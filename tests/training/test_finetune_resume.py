"""A fine-tuning run has a language-model run's guarantees: its run directory is locked, last.ckpt is written by
wall time and at the end (an early stop too), and SIGTERM saves, exits 143 naming the resume command, which then
lands on the uninterrupted run's weights and results exactly and counts the training time before the stop."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from biotf.errors import InputError
from biotf.training import callbacks, entry
from biotf.finetune.run import train_task
from biotf.training.rundir import RunDirectoryError
from training_helpers import REPO, SUBPROCESS_ENV, finetune_config, finetune_overrides

STEPS = 30

# train.py's entry point, sending itself SIGTERM as a scheduler would, as optimizer step N+1 begins.
TERMINATOR = '''
import os, signal, sys
from biotf.finetune.module import TaskModule
n = int(sys.argv[1])
step = TaskModule.training_step
def training_step(self, batch, batch_idx):
    if self.global_step == n:
        os.kill(os.getpid(), signal.SIGTERM)
    return step(self, batch, batch_idx)
TaskModule.training_step = training_step
from biotf.training.entry import main
sys.exit(main(sys.argv[3:], script=sys.argv[2]))
'''


def last(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


@pytest.mark.slow
def test_sigterm_saves_stops_and_resumes_in_place_exactly(pretrained, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # Dropout in the head, so the RNG state must travel; 12 batches an epoch, so the resume is mid-epoch.
    common = finetune_overrides(pretrained, "data.label_column=label", f"trainer.max_steps={STEPS}",
                                "finetune.head_dropout=0.2")
    run_dir = tmp_path / "run"
    terminator = tmp_path / "terminator.py"
    terminator.write_text(TERMINATOR)
    stopped = subprocess.run([sys.executable, str(terminator), "12", str(REPO / "train.py"), *common,
                              f"hydra.run.dir={run_dir}"], cwd=tmp_path, env=SUBPROCESS_ENV, capture_output=True,
                             text=True, timeout=300)
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


def test_a_resume_that_would_train_on_another_split_is_refused(pretrained, tmp_path):
    cfg = finetune_config(pretrained, "data.label_column=label", "trainer.max_steps=2")
    train_task(cfg, tmp_path)
    shutil.rmtree(tmp_path / "model")  # as a run stopped before its export
    split = (tmp_path / "split.tsv").read_text()
    resume = finetune_config(pretrained, "data.label_column=label", "trainer.max_steps=4", "seed=1",
                             f"ckpt_path={tmp_path / 'checkpoints' / 'last.ckpt'}")
    with pytest.raises(InputError, match=r"resuming: \d+ records would change sides against .*split.tsv"):
        train_task(resume, tmp_path)
    assert (tmp_path / "split.tsv").read_text() == split  # the run's split is left as it was
    same = finetune_config(pretrained, "data.label_column=label", "trainer.max_steps=4",
                           f"ckpt_path={tmp_path / 'checkpoints' / 'last.ckpt'}")
    assert train_task(same, tmp_path).steps == 4


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
