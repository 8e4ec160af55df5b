"""Every experiment runs end to end on its shipped data (tiny model, two steps)."""

from __future__ import annotations

import json

import pytest

from biotf.entry import train as entry
from training_helpers import TINY

# TINY makes the model bidirectional; the causal-LM experiment gets it back, and a small BPE vocabulary.
# smiles_clm's check of its samples draws 4 of them, not the preset's 1,000.
EXTRA = {"protein_mlm": [], "quickstart": [], "dna_mlm": [], "smiles_mlm": [],
         "text_clm": ["model.causal=true", "tokenizer.vocab_size=300"],
         "smiles_clm": ["model.causal=true", "trainer.validity_samples=4"]}


@pytest.mark.parametrize("experiment", sorted(EXTRA))
def test_experiment_runs_a_few_steps(experiment, tmp_path, cache_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    status = entry.main([f"experiment={experiment}", *TINY, *EXTRA[experiment], "trainer.max_steps=2",
                         f"data.cache_dir={cache_dir}", f"hydra.run.dir={run_dir}"])
    assert status == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["experiment"] == experiment and summary["steps"] == 2
    assert summary["objective"] == ("clm" if experiment.endswith("_clm") else "mlm")
    assert summary["unigram_baseline"] > 0 and summary["final_val_loss"] > 0
    # The figure that says whether the model is usable: loss vs unigram for every run, sample validity for smiles_clm.
    assert [check["name"] for check in summary["checks"]] == (["sample_validity"] if experiment == "smiles_clm" else [])
    assert (run_dir / "checkpoints" / "last.ckpt").is_file() and (run_dir / "tokenizer.json").is_file()


def test_the_quickstart_is_the_default_run_cut_short():
    """README's first look: the default run's model, data, tokenizer and learning rate, a tenth of its steps."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from biotf.conventions import CONF_DIR

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        default, quick = (OmegaConf.to_container(compose(config_name="config", overrides=overrides))
                          for overrides in ([], ["experiment=quickstart"]))
    assert quick["experiment"] == "quickstart" and quick["trainer"]["max_steps"] <= default["trainer"]["max_steps"] / 10
    for section in ("model", "data", "tokenizer"):
        assert quick[section] == default[section], section
    assert quick["optim"]["lr"] == default["optim"]["lr"]
    assert quick["trainer"]["max_steps"] // quick["trainer"]["val_check_interval"] >= 4  # the loss falls, in lines


def test_bf16_mixed_precision_with_gradient_accumulation(tmp_path, cache_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    status = entry.main([*TINY, "trainer.precision=bf16-mixed", "trainer.accumulate_grad_batches=2",
                         "trainer.max_steps=2", f"data.cache_dir={cache_dir}", f"hydra.run.dir={run_dir}"])
    assert status == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 2  # optimizer steps, each over two batches
    assert summary["tokens_seen"] > 0 and summary["final_val_loss"] > 0
