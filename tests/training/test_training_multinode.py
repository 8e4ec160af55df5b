"""Training over several nodes, simulated on this machine: two torchrun launches of one process each (--nnodes 2,
--node-rank 0 / 1, MASTER_ADDR=127.0.0.1), as two hosts of a Slurm or torchrun job would start them."""

from __future__ import annotations

import csv
import subprocess

import pytest
import torch

from biotf.entry import train as entry
from torchrun_helpers import SEVERAL_PROCESSES, free_port, torchrun
from training_helpers import REPO, SUBPROCESS_ENV, TINY, finish, start_script, write_proteins

STEPS = 8
# Rank 0 of the first node stops itself with SIGTERM at a step, as a preempted host would be stopped.
PREEMPTED = '''
import os, signal, sys
from biotf.training.module import LanguageModelTask
step = LanguageModelTask.training_step
def training_step(self, batch, batch_idx):
    if self.global_step == int(os.environ["STOP_AT"]) and os.environ["RANK"] == "0":
        os.kill(os.getpid(), signal.SIGTERM)
    return step(self, batch, batch_idx)
LanguageModelTask.training_step = training_step
from biotf.entry.train import main
sys.exit(main(sys.argv[1:], script=sys.argv[0]))
'''


def two_nodes(tmp_path, args: list[str], stop_at: int | None = None) -> list[subprocess.CompletedProcess]:
    """`torchrun --nnodes 2 --node-rank R --nproc-per-node 1 train.py *args` for R = 0, 1, at once."""
    script = REPO / "train.py"
    env = dict(SUBPROCESS_ENV)
    if stop_at is not None:
        script = tmp_path / "preempted.py"
        script.write_text(PREEMPTED)
        env["STOP_AT"] = str(stop_at)
    port = free_port()
    launches = [subprocess.Popen([*torchrun("--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1",
                                            "--master-port", str(port)),
                                  str(script), *args, "trainer.accelerator=cpu", "trainer.devices=1",
                                  "trainer.num_nodes=2", "trainer.strategy=ddp"],
                                 cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for node in (0, 1)]
    return [subprocess.CompletedProcess(p.args, p.wait(timeout=400), *p.communicate()) for p in launches]


def last(run_dir) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


def logged_steps(run_dir) -> list[int]:
    with open(run_dir / "metrics.csv") as handle:
        return [int(float(row["step"])) for row in csv.DictReader(handle) if row.get("train/loss")]


@SEVERAL_PROCESSES
@pytest.mark.slow
def test_two_nodes_train_into_one_run_directory_and_resume_a_preempted_run_exactly(tmp_path, cache_dir):
    fasta = write_proteins(tmp_path / "proteins.fasta")
    common = [*TINY, f"data.path={fasta}", f"data.cache_dir={cache_dir}", f"trainer.max_steps={STEPS}",
              "trainer.val_check_interval=4", "model.dropout=0.1"]
    run_dir, reference_dir = tmp_path / "run", tmp_path / "uninterrupted"
    # The uninterrupted reference: the same two ranks, launched as two processes of one node by Lightning (two
    # processes to start instead of two launchers and their two workers; the ranks compute the same). It depends on
    # nothing of the other runs: it trains beside them (`start_script`).
    started = start_script([*common, f"hydra.run.dir={reference_dir}", "trainer.accelerator=cpu", "trainer.devices=2",
                            "trainer.strategy=ddp"], cwd=tmp_path)
    stopped = two_nodes(tmp_path, [*common, f"hydra.run.dir={run_dir}"], stop_at=3)
    assert all(p.returncode != 0 for p in stopped)  # both nodes stop: one by its signal, one by the agreement
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    assert last(run_dir)["global_step"] == 4 and f"stopped by SIGTERM at step 4; saved {checkpoint}" in stopped[0].stderr
    resumed = two_nodes(tmp_path, [*common, f"ckpt_path={checkpoint}"])  # the printed resume: no hydra.run.dir
    reference = finish(started, timeout=400)
    for result in (*resumed, reference):
        assert result.returncode == 0, "\n".join(p.stderr[-2000:] for p in (*resumed, reference))
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["run", "uninterrupted"]  # no other run dirs
    assert [p.stdout.count("biotf run summary") for p in resumed] == [1, 0]  # rank 0 reports
    after, expected = last(run_dir), last(reference_dir)
    assert after["global_step"] == expected["global_step"] == STEPS
    for name, value in expected["state_dict"].items():
        assert torch.equal(after["state_dict"][name], value), name
    assert logged_steps(run_dir) == logged_steps(reference_dir) == list(range(STEPS))


def test_a_launch_over_several_processes_must_name_its_run_directory(monkeypatch, capsys):
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert entry.main([*TINY]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "hydra.run.dir=None: this process is one of 4 that torchrun or srun started, and each would name its own run "
        "directory by the clock: give hydra.run.dir=DIR, the same on every node")


def test_ranks_other_than_zero_leave_hydras_files_to_rank_zero(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert entry.check_launch(["hydra.run.dir=x"]) == ["hydra.run.dir=x", "hydra.output_subdir=null"]
    monkeypatch.setenv("RANK", "0")
    assert entry.check_launch(["hydra.run.dir=x"]) == ["hydra.run.dir=x"]
