"""2-process DDP on CPU writes one run directory whose checkpoint loads; a Hydra multirun gives one run per value."""

from __future__ import annotations

import json

import pytest

import biotf
from biotf.training import entry
from training_helpers import TINY, run_script


@pytest.mark.slow
def test_ddp_on_cpu_writes_one_run_directory(tmp_path, cache_dir):
    result = run_script(["trainer.accelerator=cpu", "trainer.devices=2", "trainer.strategy=ddp", *TINY,
                         "trainer.max_steps=5", f"data.cache_dir={cache_dir}"], cwd=tmp_path, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = list((tmp_path / "outputs" / "protein_mlm").iterdir())
    assert len(runs) == 1, runs  # not one per rank
    run = runs[0]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 5
    assert result.stdout.count("biotf run summary") == 1  # only rank 0 reports
    model, tokenizer = biotf.load_pretrained(run / "checkpoints" / "last.ckpt")
    assert model.config.vocab_size == tokenizer.vocab_size


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
    found = [biotf.load_pretrained(job).model.config.pos for job in jobs]
    assert sorted(found) == sorted(positions)
