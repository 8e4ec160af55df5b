"""2-process DDP on CPU writes one run directory whose checkpoint loads; a Hydra multirun gives one run per value."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest
import torch

from biotf.api import Model
from biotf.entry import train as entry
from torchrun_helpers import SEVERAL_PROCESSES
from training_helpers import SUBPROCESS_ENV, TINY, run_script, train_command


@SEVERAL_PROCESSES
@pytest.mark.slow
def test_ddp_on_cpu_writes_one_run_directory(tmp_path, cache_dir):
    # last.ckpt due by wall time at every step: each save goes through the ranks' per-step agreement.
    result = run_script(["trainer.accelerator=cpu", "trainer.devices=2", "trainer.strategy=ddp", *TINY,
                         "trainer.max_steps=5", "trainer.checkpoint_every_minutes=1e-9", f"data.cache_dir={cache_dir}"],
                        cwd=tmp_path, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = list((tmp_path / "outputs" / "protein_mlm").iterdir())
    assert len(runs) == 1, runs  # not one per rank
    run = runs[0]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 5
    assert result.stdout.count("biotf run summary") == 1  # only rank 0 reports
    loaded = Model.load(run / "checkpoints" / "last.ckpt")
    model, tokenizer = loaded.network, loaded.tokenizer
    assert model.config.vocab_size == tokenizer.vocab_size


@SEVERAL_PROCESSES
@pytest.mark.slow
def test_ddp_sigterm_to_the_launching_process_only_saves_and_stops_every_rank(tmp_path, cache_dir):
    """`docker stop` signals only the first process: the other rank learns it in the per-step agreement, both
    join the checkpoint write and stop, instead of one waiting forever in the next all-reduce."""
    run_dir = tmp_path / "run"
    process = subprocess.Popen(train_command(["trainer.accelerator=cpu", "trainer.devices=2", "trainer.strategy=ddp",
                                              *TINY, "trainer.max_steps=400", f"data.cache_dir={cache_dir}",
                                              f"hydra.run.dir={run_dir}"]),
                               cwd=tmp_path, env=SUBPROCESS_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True)
    last = run_dir / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + 300
    while not last.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 143, err[-3000:]
    step = torch.load(last, weights_only=True)["global_step"]
    assert 2 <= step < 400 and f"stopped by SIGTERM at step {step}; saved {last}" in err
    assert err.count("stopped by SIGTERM") == 1  # rank 0 reports
    # resumed in place by 2 processes: rank 0 alone moves its Hydra files into .hydra/ once the resume is accepted
    result = run_script(["trainer.accelerator=cpu", "trainer.devices=2", "trainer.strategy=ddp", *TINY,
                         f"trainer.max_steps={step + 2}", f"data.cache_dir={cache_dir}", f"ckpt_path={last}"],
                        cwd=tmp_path, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    assert torch.load(last, weights_only=True)["global_step"] == step + 2
    assert f"trainer.max_steps={step + 2}" in (run_dir / ".hydra" / "overrides.yaml").read_text()
    assert not (run_dir / ".hydra.pending").exists()


@pytest.mark.slow
def test_multirun_gives_one_run_directory_per_position_encoding(tmp_path, cache_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    positions = ["learned", "sinusoidal", "rope", "alibi"]
    status = entry.main(["-m", f"model.pos={','.join(positions)}", *TINY, "trainer.max_steps=2",
                         f"data.cache_dir={cache_dir}"])
    assert status == 0
    (sweep,) = list((tmp_path / "multirun" / "protein_mlm").iterdir())
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and (p / "checkpoints").is_dir())
    assert len(jobs) == 4
    found = [Model.load(job).network.config.pos for job in jobs]
    assert sorted(found) == sorted(positions)
