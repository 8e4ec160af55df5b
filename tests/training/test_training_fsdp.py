"""`trainer.strategy=fsdp` (FSDP2) on 2 CPU processes over gloo: it trains as DDP does, its sharded checkpoints stop
and resume exactly, reshard onto another number of processes, and end as the single file every command reads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from biotf.checkpoint import save_checkpoint
from biotf.checkpoint.loading import load_pretrained
from biotf.checkpoint.sharded_checkpoint import read_full, verify_sharded
from biotf.cli import main as biotf_main
from biotf.entry import train as entry
from protein_batches import masked_protein_batch
from torchrun_helpers import SEVERAL_PROCESSES, one_at_a_time
from training_helpers import TINY, finish, start_script, stop_once_sharded, write_proteins

STEPS = 20
# float32: DDP all-reduces whole gradients, FSDP2 reduce-scatters their shards; the sums are the same numbers added
# in another order, and 20 AdamW steps carry those last-bit differences (measured: below 1e-6 here).
LOSS_TOL = 1e-5
WEIGHT_TOL = 1e-5


@pytest.mark.parametrize("overrides, expected", [
    pytest.param(["trainer.accelerator=gpu"], "invalid config trainer.accelerator='gpu': trainer.strategy=fsdp on GPUs "
                 "needs CUDA (NCCL), and this machine has no CUDA GPU; on CPUs FSDP2 shards over gloo (allowed: auto | "
                 "cpu)", id="gpu-without-cuda",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a refusal where there is no CUDA")),
    pytest.param(["optim=muon"], "invalid config optim.optimizer='muon': trainer.strategy=fsdp splits each weight "
                 "matrix across ranks, and Muon orthogonalises whole matrices (allowed: adamw)", id="muon"),
])
def test_fsdp_where_it_cannot_run_is_one_line_naming_the_key(overrides, expected, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert entry.main(["experiment=quickstart", "trainer.strategy=fsdp", *overrides]) == 2
    err = capsys.readouterr().err
    assert err.split(": error: ")[1] == expected + "\n", err
    assert not (tmp_path / "outputs").exists()


def test_a_single_file_resume_under_fsdp_loads_what_the_run_checked_without_reading_it_again(tmp_path):
    """A single-file checkpoint is read once, as the run starts (its CRC-32 checked, `read_resumed`), and handed to
    the checkpoint IO: the strategy loads that content into the model and optimizer, not the file again (gone here)."""
    from biotf.training.callbacks import VerifiedCheckpointIO
    from biotf.training.sharding import ShardedStrategy

    model = torch.nn.Sequential(torch.nn.Linear(3, 2))
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    weights = {name: value + 1 for name, value in model.state_dict().items()}
    moments = {index: {key: value + 1 for key, value in state.items()}
               for index, state in optimizer.state_dict()["state"].items()}
    checked = {"state_dict": weights, "optimizer_states": [{**optimizer.state_dict(), "state": moments}],
               "global_step": 3}
    strategy = ShardedStrategy()
    strategy.checkpoint_io = VerifiedCheckpointIO()
    strategy.model, strategy.optimizers = model, [optimizer]
    strategy.checkpoint_io.hand_over(tmp_path / "last.ckpt", checked)
    assert strategy.load_checkpoint(tmp_path / "last.ckpt") == {"global_step": 3}
    for name, value in model.state_dict().items():
        torch.testing.assert_close(value, weights[name], rtol=0, atol=0)
    torch.testing.assert_close(optimizer.state_dict()["state"], moments, rtol=0, atol=0)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("fsdp")
    fasta = write_proteins(root / "proteins.fasta")
    common = [*TINY, f"data.path={fasta}", f"data.cache_dir={root / 'cache'}", f"trainer.max_steps={STEPS}",
              "trainer.checkpoint_every_n_steps=5", "trainer.val_check_interval=5", "optim.warmup_steps=3",
              "model.dropout=0.1", "trainer.accelerator=cpu"]
    return root, common


def train(root, *runs: tuple[str, list[str]]) -> list[Path]:
    """Each (name, overrides) trained into `root / name`, all side by side (`start_script`); their directories."""
    started = [start_script([*overrides, f"hydra.run.dir={root / name}"], cwd=root) for name, overrides in runs]
    for process in started:
        result = finish(process, timeout=400)
        assert result.returncode == 0, result.stderr[-3000:]
    return [root / name for name, _ in runs]


def last(run_dir):
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


def train_losses(run_dir) -> np.ndarray:
    import pandas as pd

    metrics = pd.read_csv(run_dir / "metrics.csv")
    return metrics.dropna(subset=["train/loss"]).sort_values("step")["train/loss"].to_numpy()


def assert_same_state(actual, expected, atol):
    assert actual["global_step"] == expected["global_step"]
    for name, value in expected["state_dict"].items():
        torch.testing.assert_close(actual["state_dict"][name], value, rtol=0, atol=atol, msg=name)
    for index, moments in expected["optimizer_states"][0]["state"].items():
        for key, value in moments.items():
            torch.testing.assert_close(actual["optimizer_states"][0]["state"][index][key], value, rtol=0, atol=atol)


@pytest.fixture(scope="module")
def fsdp_and_ddp_runs(setup, tmp_path_factory):
    root, common = setup
    with one_at_a_time(tmp_path_factory):
        return train(root, ("fsdp", [*common, "trainer.devices=2", "trainer.strategy=fsdp"]),
                     ("ddp", [*common, "trainer.devices=2", "trainer.strategy=ddp"]))


@pytest.fixture(scope="module")
def fsdp_run(fsdp_and_ddp_runs):
    return fsdp_and_ddp_runs[0]


@pytest.mark.slow  # its runs are its fixture's, which holds `one_at_a_time` while they train
def test_fsdp_trains_as_ddp_does_and_ends_as_one_checkpoint_file(setup, fsdp_and_ddp_runs, tmp_path, capsys):
    root, common = setup
    fsdp_run, ddp = fsdp_and_ddp_runs
    np.testing.assert_allclose(train_losses(fsdp_run), train_losses(ddp), rtol=0, atol=LOSS_TOL)
    assert len(train_losses(fsdp_run)) == STEPS
    # consolidated: the single file DDP writes, full weights and optimizer state keyed alike
    assert (fsdp_run / "checkpoints" / "last.ckpt").is_file() and (fsdp_run / "checkpoints" / "best.ckpt").is_file()
    assert_same_state(last(fsdp_run), last(ddp), WEIGHT_TOL)
    # ... which every command reads as any run's
    output = tmp_path / "embeddings.npz"
    assert biotf_main(["embed", "--model", str(fsdp_run), "--input", str(root / "proteins.fasta"),
                       "--output", str(output)]) == 0, capsys.readouterr().err
    assert np.load(output)["embeddings"].shape[0] == 60


def stop_by_sigterm(root, name, *overrides):
    """Train in `root / name` until the first sharded checkpoint is written, then stop the run with SIGTERM (it saves
    and exits): its last.ckpt, left sharded (the run did not end), and the step it holds."""
    checkpoint = root / name / "checkpoints" / "last.ckpt"
    stop_once_sharded(start_script([*overrides, f"hydra.run.dir={root / name}"], cwd=root), checkpoint)
    step = verify_sharded(checkpoint)["global_step"]
    assert 5 <= step < STEPS, step
    return checkpoint, step


@SEVERAL_PROCESSES
@pytest.mark.slow
def test_fsdp_stopped_by_sigterm_resumes_exactly_and_reshards(setup, fsdp_run):
    root, common = setup
    checkpoint, step = stop_by_sigterm(root, "stopped", *common, "trainer.devices=2", "trainer.strategy=fsdp")
    saved = read_full(checkpoint)  # written by both ranks

    # resharded: written by 2 processes, resumed by 1 (DCP reads every tensor's slices from both ranks' files), equal
    # to a plain 1-process run resumed from the same checkpoint consolidated into one file
    consolidated = root / "consolidated.ckpt"
    save_checkpoint(saved, consolidated)
    more = [f"trainer.max_steps={step + 2}", "trainer.devices=1"]
    # stop-and-go equals uninterrupted, from the sharded directory and from its single file (what a finished FSDP run
    # or a DDP run leaves: each rank takes its shard of the full tensors); the latter recomputing every block in
    # backward (activation checkpointing: each block gathers its shards again; the same dropout masks, the same sums)
    two = [*common, "trainer.devices=2", "trainer.strategy=fsdp"]
    on_one, plain, *resumed_runs = train(
        root, ("on_one", [*common, *more, "trainer.strategy=fsdp", f"ckpt_path={checkpoint}"]),
        ("plain", [*common, *more, f"ckpt_path={consolidated}"]),
        ("resumed", [*two, f"ckpt_path={checkpoint}", "trainer.gradient_checkpointing=false"]),
        ("from_file", [*two, f"ckpt_path={consolidated}", "trainer.gradient_checkpointing=true"]))
    assert_same_state(last(on_one), last(plain), atol=1e-7)
    assert last(on_one)["global_step"] == step + 2

    for resumed in resumed_runs:
        assert_same_state(last(resumed), last(fsdp_run), atol=1e-7)
        np.testing.assert_allclose(train_losses(resumed), train_losses(fsdp_run)[step:], rtol=0, atol=1e-7)


# ESM-2's shape, tiny: what `biotf export-model --hf` writes as an EsmForMaskedLM checkpoint
TINY_ESM = ["model=esm2-8m", "model.d_model=32", "model.n_layers=2", "model.n_heads=4", "model.n_kv_heads=4",
            "model.d_ff=64", "model.max_seq_len=64"]
HF_TOL = 1e-5  # float32 logits of the same weights through two implementations (measured: 9e-8)


@SEVERAL_PROCESSES
@pytest.mark.slow
def test_fsdp_checkpoint_of_one_process_resumes_on_two_and_exports_to_transformers(setup, tmp_path, capsys):
    root, common = setup
    esm = [*(override for override in common if override != "model=tiny"), *TINY_ESM]
    checkpoint, step = stop_by_sigterm(root, "one_process", *esm, "trainer.devices=1", "trainer.strategy=fsdp")
    assert sorted(path.name for path in checkpoint.glob("*.distcp")) == ["__0_0.distcp"]  # one process's shard

    # resharded: the one shard, resumed by 2 processes (DCP reads each rank's slices of it), equal to the same state
    # resumed on 2 from its single file (each rank taking its shard of the full tensors: the path a DDP checkpoint
    # takes, tested above equal to the uninterrupted run)
    single = root / "one_process.ckpt"
    save_checkpoint(read_full(checkpoint), single)
    more = [*esm, f"trainer.max_steps={step + 3}", "trainer.devices=2", "trainer.strategy=fsdp"]
    on_two, from_file = train(root, ("on_two", [*more, f"ckpt_path={checkpoint}"]),
                              ("on_two_from_file", [*more, f"ckpt_path={single}"]))
    assert_same_state(last(on_two), last(from_file), atol=1e-7)
    assert last(on_two)["global_step"] == step + 3
    np.testing.assert_allclose(train_losses(on_two), train_losses(from_file), rtol=0, atol=1e-7)

    # the finished run's consolidated checkpoint, exported as a Hugging Face ESM checkpoint, computes in
    # `transformers` what it computes in biotf
    exported = tmp_path / "hf"
    assert biotf_main(["export-model", str(on_two), str(exported), "--hf"]) == 0, capsys.readouterr().err
    assert json.loads((exported / "config.json").read_text())["architectures"] == ["EsmForMaskedLM"]
    model, _ = load_pretrained(on_two)
    theirs = transformers.EsmForMaskedLM.from_pretrained(exported).eval()
    ids, mask = masked_protein_batch()
    with torch.no_grad():
        difference = (model(ids, attention_mask=mask).logits - theirs(ids, attention_mask=mask).logits).abs()
    assert difference[mask.bool()].max().item() <= HF_TOL
