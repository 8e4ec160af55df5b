"""Kill a run with SIGKILL mid-training, resume it from last.ckpt, and land on the uninterrupted run's weights
(masked LM padded and packed, causal LM on document-masked blocks). The killed run is a forked process
(`forked_process`): a real SIGKILL, without a fresh interpreter's imports."""

from __future__ import annotations

import signal
import time

import pytest
import torch

from biotf.entry import train as entry
from forked_process import Forked
from training_helpers import REPO, TINY, write_proteins

STEPS = 24


def weights(run_dir):
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


@pytest.mark.slow
@pytest.mark.parametrize("packing, causal", [pytest.param(False, False, id="False"),
                                             pytest.param(True, False, id="True"),
                                             pytest.param(True, True, id="causal-packed")])
def test_sigkill_then_resume_matches_uninterrupted_run(packing, causal, tmp_path, monkeypatch):
    fasta = tmp_path / "proteins.fasta"
    write_proteins(fasta)
    common = [*TINY, f"data.path={fasta}", f"data.cache_dir={tmp_path / 'cache'}", f"trainer.max_steps={STEPS}",
              "trainer.checkpoint_every_n_steps=3", "trainer.val_check_interval=5", "optim.warmup_steps=3",
              "model.dropout=0.1",  # dropout too: the RNG state travels in the checkpoint
              f"data.packing={str(packing).lower()}", f"model.causal={str(causal).lower()}"]
    monkeypatch.chdir(tmp_path)

    killed = tmp_path / "killed"
    process = Forked(entry.main, [*common, f"hydra.run.dir={killed}"], str(REPO / "train.py"))
    last = killed / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + 240
    while not last.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    process.kill()
    _, err = process.communicate()
    assert process.returncode == -signal.SIGKILL, err[-2000:]
    step_at_kill = weights(killed)["global_step"]
    assert 0 < step_at_kill < STEPS and not (killed / "summary.json").exists()

    resumed = tmp_path / "resumed"
    assert entry.main([*common, f"ckpt_path={last}", f"hydra.run.dir={resumed}"]) == 0
    uninterrupted = tmp_path / "uninterrupted"
    assert entry.main([*common, f"hydra.run.dir={uninterrupted}"]) == 0

    final_resumed, final_reference = weights(resumed), weights(uninterrupted)
    assert final_resumed["global_step"] == final_reference["global_step"] == STEPS
    assert final_resumed["epoch"] == final_reference["epoch"] >= 2  # crossed epoch boundaries
    for name, value in final_reference["state_dict"].items():
        torch.testing.assert_close(final_resumed["state_dict"][name], value, rtol=1e-5, atol=1e-6, msg=name)
    # The optimizer moments too: the resumed run continued the same trajectory, not merely near it.
    ref_state = final_reference["optimizer_states"][0]["state"]
    for key, state in final_resumed["optimizer_states"][0]["state"].items():
        torch.testing.assert_close(state["exp_avg"], ref_state[key]["exp_avg"], rtol=1e-5, atol=1e-7)
