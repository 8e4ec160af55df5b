"""A run directory belongs to one run: locked while training, refused when used, continued by a resume; SIGTERM
saves and stops; last.ckpt by wall time and after the first validation; config typos and bad seeds caught early."""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
from hydra import compose, initialize_config_dir

from biotf.entry import train as entry
from biotf.training import callbacks
from biotf.training import run as run_module
from biotf.training.module import LanguageModelTask
from biotf.conventions import CONF_DIR
from forked_process import Forked, run_forked
from training_helpers import REPO, TINY, write_proteins

STEPS = 12


@pytest.fixture
def common(tmp_path, cache_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fasta = write_proteins(tmp_path / "proteins.fasta")
    return [*TINY, f"data.path={fasta}", f"data.cache_dir={cache_dir}", f"trainer.max_steps={STEPS}",
            "trainer.val_check_interval=5", "model.dropout=0.1"]


def last(run_dir) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


def metric_steps(run_dir) -> list[int]:
    with open(run_dir / "metrics.csv") as handle:
        return [int(float(row["step"])) for row in csv.DictReader(handle) if row.get("train/loss")]


# --- one run per directory -------------------------------------------------------------------------
def test_a_run_directory_in_use_is_refused(common, tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (run_dir / "run.lock").write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname()}))
        assert entry.main([*common, f"hydra.run.dir={run_dir}"]) == 2
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert f"run directory {run_dir} is in use by process {holder.pid}" in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in run_dir.iterdir()) == ["run.lock"]  # nothing written, not even Hydra's .hydra/


def test_a_stale_lock_is_taken_over_and_released(common, tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.lock").write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname()}))
    assert entry.main([*common, "trainer.max_steps=2", f"hydra.run.dir={run_dir}"]) == 0
    assert (run_dir / "summary.json").is_file() and not (run_dir / "run.lock").exists()


def test_training_into_a_used_run_directory_is_refused(common, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert entry.main([*common, "trainer.max_steps=4", f"hydra.run.dir={run_dir}"]) == 0
    before = {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert entry.main([*common, "trainer.max_steps=2", "optim.lr=0.01", f"hydra.run.dir={run_dir}"]) == 2
    err = capsys.readouterr().err
    assert f"run directory {run_dir} already holds a run" in err and "ckpt_path=" in err, err
    after = {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}
    assert after == before  # best.ckpt, metrics, config and Hydra's own files untouched


def test_default_run_directories_are_unique_within_a_second():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3", job_name="train"):
        names = {compose(config_name="config", return_hydra_config=True).hydra.run.dir for _ in range(3)}
    assert len(names) == 3, names


# --- SIGTERM, then resume in place -----------------------------------------------------------------
def terminated(tmp_path, where: str, args: list[str]) -> subprocess.CompletedProcess:
    """train.py's entry point in a forked process (`forked_process`) that sends itself SIGTERM as a scheduler
    would: at `step:N` as optimizer step N+1 begins, or at `prepare` while the data is being prepared (before
    training)."""
    def run() -> int:
        point, _, n = where.partition(":")
        if point == "step":
            step = LanguageModelTask.training_step

            def training_step(self, batch, batch_idx):
                if self.global_step == int(n):
                    os.kill(os.getpid(), signal.SIGTERM)
                return step(self, batch, batch_idx)
            LanguageModelTask.training_step = training_step
        else:
            prepare = run_module.prepare_data

            def prepare_data(*prepare_args):
                os.kill(os.getpid(), signal.SIGTERM)
                return prepare(*prepare_args)
            run_module.prepare_data = prepare_data
        return entry.main(args, script=str(REPO / "train.py"))

    return run_forked(run)


def test_sigterm_before_training_stops_at_once(common, tmp_path):
    run_dir = tmp_path / "run"
    stopped = terminated(tmp_path, "prepare", [*common, f"hydra.run.dir={run_dir}"])
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert stopped.stderr.strip().splitlines()[-1] == ("train: stopped by SIGTERM before training began; "
                                                      "no checkpoint written")
    assert not (run_dir / "checkpoints").exists() and not (run_dir / "run.lock").exists()


@pytest.mark.slow
def test_sigterm_saves_stops_and_resumes_in_place_exactly(common, tmp_path):
    run_dir = tmp_path / "run"
    stopped = terminated(tmp_path, "step:6", [*common, f"hydra.run.dir={run_dir}"])
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    message = stopped.stderr.strip().splitlines()[-1]
    assert message.startswith(f"train: stopped by SIGTERM at step 7; saved {checkpoint}; resume with: python ")
    assert message.endswith(f"ckpt_path={checkpoint}") and "Traceback" not in stopped.stderr
    assert last(run_dir)["global_step"] == 7 and not (run_dir / "summary.json").exists()
    assert not (run_dir / "run.lock").exists()

    # The printed command, as a user pastes it: no hydra.run.dir, so the run continues in its own directory.
    assert entry.main([*common, f"ckpt_path={checkpoint}"]) == 0
    assert not (tmp_path / "outputs").exists()
    reference_dir = tmp_path / "uninterrupted"
    assert entry.main([*common, f"hydra.run.dir={reference_dir}"]) == 0
    resumed, reference = last(run_dir), last(reference_dir)
    assert resumed["global_step"] == reference["global_step"] == STEPS
    for name, value in reference["state_dict"].items():
        assert torch.equal(resumed["state_dict"][name], value), name
    # One run: every step logged once, one summary counting all steps and all tokens.
    assert metric_steps(run_dir) == metric_steps(reference_dir) == list(range(STEPS))
    summary, reference_summary = (json.loads((d / "summary.json").read_text()) for d in (run_dir, reference_dir))
    assert summary["steps"] == STEPS and summary["tokens_seen"] == reference_summary["tokens_seen"]
    assert summary["final_val_loss"] == reference_summary["final_val_loss"]


def test_sigterm_during_the_final_sample_check_saves_and_stops(tmp_path, cache_dir, monkeypatch):
    """smiles_clm ends by drawing molecules (1,000 in the preset, minutes): SIGTERM then stops with status 143 and the
    resume command, last.ckpt holding the final step; the resume trains no further and draws them again."""
    pytest.importorskip("rdkit")
    import gzip

    from biotf.conventions import SAMPLES_DIR
    from biotf.inference import validity

    monkeypatch.chdir(tmp_path)
    with gzip.open(SAMPLES_DIR / "moses_train_head20k.csv.gz", "rt") as handle:
        (tmp_path / "slice.csv").write_text("".join(next(handle) for _ in range(201)))
    run_dir = tmp_path / "run"
    args = ["experiment=smiles_clm", *TINY, "model.causal=true", "trainer.max_steps=2", "trainer.validity_samples=4",
            f"data.path={tmp_path / 'slice.csv'}", f"data.cache_dir={cache_dir}", f"hydra.run.dir={run_dir}"]

    def run() -> int:
        def slow_sampling(*_args, **_kwargs):  # SIGTERM as the sampling begins, then minutes of drawing
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(200):
                time.sleep(0.05)
            return validity.SampleValidity(4, 0, 0, 10.0)
        validity.sample_validity = slow_sampling
        return entry.main(args, script=str(REPO / "train.py"))

    stopped = run_forked(run)
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    assert stopped.returncode == 143, stopped.stderr[-3000:]  # not 0 once the drawing ends
    message = stopped.stderr.strip().splitlines()[-1]
    assert message.startswith(f"train: stopped by SIGTERM at step 2; saved {checkpoint}; resume with: python ")
    assert last(run_dir)["global_step"] == 2 and not (run_dir / "summary.json").exists()
    assert not (run_dir / "run.lock").exists()
    assert entry.main([*args, f"ckpt_path={checkpoint}"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 2 and [check["name"] for check in summary["checks"]] == ["sample_validity"]


def test_resume_in_place_keeps_the_best_checkpoint_and_warns_nothing(common, tmp_path, recwarn):
    run_dir = tmp_path / "run"
    assert entry.main([*common, "trainer.max_steps=6", f"hydra.run.dir={run_dir}"]) == 0
    best_score = torch.load(run_dir / "checkpoints" / "best.ckpt", weights_only=True)["callbacks"]
    recwarn.clear()
    # How progress shows is no training setting: a resume may change it (`rundir.RESUMABLE`).
    assert entry.main([*common, "trainer.max_steps=8", "trainer.progress=lines",
                       f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}"]) == 0
    assert not [w for w in recwarn if "dirpath" in str(w.message)], [str(w.message) for w in recwarn]
    assert metric_steps(run_dir) == list(range(8))
    callbacks_state = last(run_dir)["callbacks"]
    (key,) = [k for k in callbacks_state if k.startswith("ModelCheckpoint")]
    assert callbacks_state[key]["best_model_score"] <= best_score[key]["best_model_score"]  # carried over, not reset


def test_a_resume_in_place_keeps_every_metrics_row_up_to_its_checkpoint(common, tmp_path):
    """The final validation of a run that ended at the resumed step is logged at that step: kept (it was dropped)."""
    run_dir = tmp_path / "run"
    assert entry.main([*common, "optim=muon", "trainer.max_steps=4", f"hydra.run.dir={run_dir}"]) == 0
    before = (run_dir / "metrics.csv").read_bytes()
    assert before.splitlines()[-1].startswith(b"1,4,,,,,,")  # the final validation, at step 4
    assert entry.main([*common, "optim=muon", "trainer.max_steps=6",
                       f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}", f"hydra.run.dir={run_dir}"]) == 0
    after = (run_dir / "metrics.csv").read_bytes()
    assert after.startswith(before) and metric_steps(run_dir) == list(range(6)), after.decode()
    # appended: training rows 4 and 5, the validation after step 5 (logged at 4) and the final one (at 6)
    assert [line.split(b",")[1] for line in after.splitlines()[len(before.splitlines()):]] == [b"4", b"4", b"5", b"6"]


def test_resume_into_another_directory_keeps_the_best_checkpoint(common, tmp_path, recwarn):
    """Lightning drops the best score when the directory changes ("best_model_score won't be reloaded"): the
    resumed run's best.ckpt and best validation loss are then only those since the resume."""
    run_dir, other = tmp_path / "run", tmp_path / "other"
    assert entry.main([*common, "trainer.max_steps=6", f"hydra.run.dir={run_dir}"]) == 0  # validated at step 5
    best = torch.load(run_dir / "checkpoints" / "best.ckpt", weights_only=True)
    recwarn.clear()
    assert entry.main([*common, "trainer.max_steps=8", f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}",
                       f"hydra.run.dir={other}"]) == 0  # no validation between steps 6 and 8
    assert not [w for w in recwarn if "won't be reloaded" in str(w.message)], [str(w.message) for w in recwarn]
    carried = torch.load(other / "checkpoints" / "best.ckpt", weights_only=True)
    assert carried["global_step"] == best["global_step"] == 5
    (key,) = [k for k in last(other)["callbacks"] if k.startswith("ModelCheckpoint")]
    assert last(other)["callbacks"][key]["best_model_path"] == str((other / "checkpoints" / "best.ckpt").resolve())
    score = float(best["callbacks"][key]["best_model_score"])
    assert json.loads((other / "summary.json").read_text())["best_val_loss"] == score


# --- two resumes of one checkpoint at once ----------------------------------------------------------
def wait_for(path, process: Forked, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1][-3000:]
        time.sleep(0.01)  # the outcome never depends on this delay, only how soon the test notices


def paused(function, *args, where, ready, go):
    """`function(*args)` in a forked process that creates `ready` and waits for `go` at `where` (a callable run_module
    or LanguageModelTask attribute, patched in the child only)."""
    owner, name = where

    def run() -> int:
        original = getattr(owner, name)

        def waiting(*call_args, **call_kwargs):
            ready.touch()
            while not go.exists():
                time.sleep(0.01)
            return original(*call_args, **call_kwargs)
        setattr(owner, name, waiting)
        return function(*args)
    return Forked(run)


def test_a_resume_elsewhere_of_a_run_being_resumed_in_place_is_refused(common, tmp_path, capsys):
    """Before: both exit 0, and the other directory held a run that had trained nothing from its checkpoint."""
    run_dir, other = tmp_path / "run", tmp_path / "other"
    assert entry.main([*common, "trainer.max_steps=6", f"hydra.run.dir={run_dir}"]) == 0
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    ready, go = tmp_path / "ready", tmp_path / "go"
    in_place = paused(entry.main, [*common, "trainer.max_steps=9", f"ckpt_path={checkpoint}"], str(REPO / "train.py"),
                      where=(LanguageModelTask, "on_train_batch_start"), ready=ready, go=go)
    try:
        wait_for(ready, in_place)
        capsys.readouterr()
        assert entry.main([*common, "trainer.max_steps=9", f"ckpt_path={checkpoint}", f"hydra.run.dir={other}"]) == 2
    finally:
        go.touch()
    err = capsys.readouterr().err
    assert f"{checkpoint} belongs to run directory {run_dir}, which process {in_place.pid} on " in err, err
    assert len(err.strip().splitlines()) == 1 and not other.exists()
    _, in_place_err = in_place.communicate(240)
    assert in_place.returncode == 0, in_place_err[-3000:]
    assert last(run_dir)["global_step"] == 9 and metric_steps(run_dir) == list(range(9))


@pytest.mark.parametrize("steps", [9, 11])
def test_a_resume_elsewhere_trains_from_the_checkpoint_it_read_while_the_run_goes_on(common, tmp_path, capsys, steps):
    """A resume into another directory reads the checkpoint, then its run is resumed in place and replaces it: the
    first trains on from what it read (it trained nothing from the newer file before), to the same weights; unless the
    run found a better best.ckpt meanwhile (validated at 10), which the first would copy as its own: refused."""
    run_dir, other = tmp_path / "run", tmp_path / "other"
    assert entry.main([*common, "trainer.max_steps=6", f"hydra.run.dir={run_dir}"]) == 0  # validated at 5
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    best = (run_dir / "checkpoints" / "best.ckpt").read_bytes()
    ready, go = tmp_path / "ready", tmp_path / "go"
    elsewhere = paused(entry.main, [*common, f"trainer.max_steps={steps}", f"ckpt_path={checkpoint}",
                                    f"hydra.run.dir={other}"], str(REPO / "train.py"),
                       where=(run_module, "prepare_data"), ready=ready, go=go)
    try:
        wait_for(ready, elsewhere)  # it has read last.ckpt (step 6)
        assert entry.main([*common, f"trainer.max_steps={steps}", f"ckpt_path={checkpoint}"]) == 0
    finally:
        go.touch()
    _, err = elsewhere.communicate(240)
    assert metric_steps(run_dir) == list(range(steps))
    if steps == 11:
        assert (run_dir / "checkpoints" / "best.ckpt").read_bytes() != best  # the run's new best, at step 10
        assert elsewhere.returncode == 2 and len(err.strip().splitlines()) == 1, err[-3000:]
        assert f"{run_dir / 'checkpoints' / 'best.ckpt'} is no longer the best checkpoint {checkpoint} records" in err
        assert sorted(p.name for p in other.iterdir()) == [".hydra"]  # nothing of a run written
        return
    assert elsewhere.returncode == 0, err[-3000:]
    assert metric_steps(other) == [6, 7, 8]
    assert (other / "checkpoints" / "best.ckpt").read_bytes() == best
    for name, value in last(run_dir)["state_dict"].items():
        assert torch.equal(last(other)["state_dict"][name], value), name


# --- when last.ckpt is written ---------------------------------------------------------------------
def test_last_checkpoint_by_wall_time(common, tmp_path, saves, monkeypatch):
    clock = iter(range(0, 10**6, 20))  # every read of the clock is 20 s later: 30 s are due every other read
    monkeypatch.setattr(callbacks.RunControl, "clock", staticmethod(lambda: float(next(clock))))
    assert entry.main([*common, "trainer.max_steps=6", "trainer.val_check_interval=100",
                       "trainer.checkpoint_every_n_steps=1000", "trainer.checkpoint_every_minutes=0.5",
                       f"hydra.run.dir={tmp_path / 'run'}"]) == 0
    assert saves[-1] == 6 and len(saves) >= 3 and saves == sorted(set(saves)), saves


def test_last_checkpoint_after_the_first_validation(common, tmp_path, saves):
    assert entry.main([*common, "trainer.max_steps=8", "trainer.val_check_interval=3",
                       "trainer.checkpoint_every_n_steps=1000", "trainer.checkpoint_every_minutes=1000",
                       f"hydra.run.dir={tmp_path / 'run'}"]) == 0
    assert saves == [4, 8]  # the step after the first validation (at 3) and the final one; not after the second


# --- config errors ---------------------------------------------------------------------------------
@pytest.mark.parametrize("override, expected", [
    ("model.poss=rope", "invalid config model.poss='rope': not a config key; did you mean `pos`? (allowed: "),
    ("+model.poss=rope", "invalid config model.poss='rope': not a config key; did you mean `pos`? (allowed: "),
    ("trainer.max_step=3", "did you mean `max_steps`?"),
    ("seed=-1", "invalid config seed=-1 (allowed: an integer from 0 to 4294967295)"),
])
def test_config_mistakes_are_one_line_before_any_data_is_read(override, expected, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert entry.main([override]) == 2
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1, err
    assert "CHOICES" not in err and "+model" not in err and "Traceback" not in err
    assert not (tmp_path / "outputs").exists()


def drop_adamw_state(checkpoint: dict) -> None:
    checkpoint["optimizer_states"][0]["members"].pop()


def lengthen_schedule(checkpoint: dict) -> None:
    checkpoint["lr_schedulers"][0]["base_lrs"].append(1e-3)


def drop_best_score(checkpoint: dict) -> None:
    (key,) = [k for k in checkpoint["callbacks"] if k.startswith("ModelCheckpoint")]
    del checkpoint["callbacks"][key]["best_model_score"]


def files_of(run_dir) -> dict:
    """Every file's bytes, Hydra's .hydra/ included."""
    return {p.relative_to(run_dir): p.read_bytes() for p in run_dir.rglob("*")
            if p.is_file()}


@pytest.mark.parametrize("edit, named", [(drop_adamw_state, "optimizer state does not fit this run's optimizer"),
                                         (lengthen_schedule, "learning-rate schedule is not one of"),
                                         (drop_best_score, "state of ModelCheckpoint does not fit")])
def test_a_checkpoint_that_cannot_be_resumed_is_refused_before_the_run_changes(common, tmp_path, capsys, edit, named):
    """A checkpoint edited by a tool (its CRC-32 recomputed): one line, and the run directory as it was (config.yaml
    was rewritten and metrics.csv cut to its header before Lightning's traceback)."""
    from biotf.checkpoint import read_checkpoint, save_checkpoint

    run_dir = tmp_path / "run"
    muon = [*common, "optim=muon", f"hydra.run.dir={run_dir}"]
    assert entry.main([*muon, "trainer.max_steps=6"]) == 0
    checkpoint_path = run_dir / "checkpoints" / "last.ckpt"
    checkpoint = read_checkpoint(checkpoint_path)
    checkpoint.pop("biotf_crc32", None)
    edit(checkpoint)
    save_checkpoint(checkpoint, checkpoint_path)
    before = files_of(run_dir)
    capsys.readouterr()
    assert entry.main([*muon, "trainer.max_steps=8", f"ckpt_path={checkpoint_path}"]) == 2
    err = capsys.readouterr().err
    assert f"error: {checkpoint_path} cannot be resumed by this run: " in err and named in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert files_of(run_dir) == before


def test_a_resume_refused_in_its_job_leaves_hydra_files_as_they_were(common, tmp_path, capsys):
    """`train.py ckpt_path=<run>/checkpoints/last.ckpt` (in place) refused inside the job, after Hydra composed its
    files: .hydra/ byte for byte as it was and nothing staged left; the resume from the checkpoint as saved continues
    the run, and .hydra/ then records it."""
    from biotf.checkpoint import read_checkpoint, save_checkpoint

    run_dir = tmp_path / "run"
    assert entry.main([*common, "trainer.max_steps=6", f"hydra.run.dir={run_dir}"]) == 0
    checkpoint_path = run_dir / "checkpoints" / "last.ckpt"
    saved = checkpoint_path.read_bytes()
    checkpoint = read_checkpoint(checkpoint_path)
    checkpoint.pop("biotf_crc32", None)
    lengthen_schedule(checkpoint)
    save_checkpoint(checkpoint, checkpoint_path)
    before, names = files_of(run_dir), sorted(path.name for path in run_dir.iterdir())
    resume = f"ckpt_path={checkpoint_path}"
    assert entry.main([*common, "trainer.max_steps=8", resume]) == 2
    assert "cannot be resumed by this run" in capsys.readouterr().err
    assert files_of(run_dir) == before and sorted(path.name for path in run_dir.iterdir()) == names
    checkpoint_path.write_bytes(saved)
    assert entry.main([*common, "trainer.max_steps=8", resume]) == 0
    assert last(run_dir)["global_step"] == 8 and metric_steps(run_dir) == list(range(8))
    assert "trainer.max_steps=8" in (run_dir / ".hydra" / "overrides.yaml").read_text()
    assert sorted(path.name for path in run_dir.iterdir()) == names


def test_optim_muon_trains_and_resumes(common, tmp_path, capsys):
    """`train.py optim=muon`: the checkpoint holds both optimizers' state, a resume under the other optimizer is refused
    by the run-config check naming the key, and one under Muon continues the run (that a restored Muon takes exactly
    the uninterrupted steps: test_training_units)."""
    run_dir = tmp_path / "run"
    muon, resume = [*common, "optim=muon"], f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}"
    assert entry.main([*muon, "trainer.max_steps=6", f"hydra.run.dir={run_dir}"]) == 0
    members = last(run_dir)["optimizer_states"][0]["members"]
    assert len(members) == 2 and all(member["state"] for member in members)  # Muon's momenta, AdamW's moments
    capsys.readouterr()
    assert entry.main([*common, "trainer.max_steps=8", resume]) == 2
    assert "optim.optimizer ('muon' -> 'adamw')" in capsys.readouterr().err
    assert entry.main([*muon, "trainer.max_steps=8", resume]) == 0
    assert last(run_dir)["global_step"] == 8 and metric_steps(run_dir) == list(range(8))
