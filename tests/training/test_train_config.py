"""Configs compose for every experiment, and bad overrides fail at once, naming the key and allowed values."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from biotf.conventions import CONF_DIR, SAMPLES_DIR
from biotf.entry import train as entry
from biotf.training.train_config import TrainConfig, validate

EXPERIMENTS = ["protein_mlm", "dna_mlm", "smiles_mlm", "text_clm"]


def composed(*overrides: str) -> TrainConfig:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return validate(compose(config_name="config", overrides=list(overrides)))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_composes_and_validates(experiment):
    config = composed(f"experiment={experiment}")
    assert config.experiment == experiment
    assert config.objective == ("clm" if experiment == "text_clm" else "mlm")
    assert config.data.max_length <= config.model.max_seq_len


def test_default_is_the_protein_run():
    config = composed()
    assert (config.experiment, config.tokenizer["kind"], config.objective) == ("protein_mlm", "protein", "mlm")
    assert config.data.path == str(SAMPLES_DIR / "deeploc_our_val_set.fasta")


@pytest.mark.parametrize("override, expected", [
    ("model.pos=foo", "model.pos='foo' (allowed: learned | sinusoidal | rope | alibi | t5 | none)"),
    ("trainer.max_steps=0", "trainer.max_steps=0 (allowed: an integer >= 1)"),
    ("experiment=nope", "experiment='nope': no such option (allowed: dna_mlm, "),
    ("trainer.precision=16", "trainer.precision='16' (allowed: 32 | 32-true | bf16-mixed)"),
    ("trainer.strategy=horovod", "trainer.strategy='horovod' (allowed: auto | ddp | fsdp)"),
    ("optim.optimizer=sgd", "optim.optimizer='sgd' (allowed: adamw | muon)"),
    ("data.long_policy=squash", "data.long_policy='squash' (allowed: crop | drop | error)"),
    ("model.d_model=abc", "model.d_model=abc"),
    ("trainer.max_stepz=3", "trainer.max_stepz=3: not a config key; did you mean `max_steps`?"),
    ("data.max_length=4096", "data.max_length=4096 (allowed: <= model.max_seq_len=512)"),
    ("tokenizer=nope", "tokenizer='nope': no such option"),
    ("data.path=/no/such/file.fasta", "data.path: input file /no/such/file.fasta does not exist"),
    ("ckpt_path=/no/such.ckpt", "ckpt_path='/no/such.ckpt'"),
    ("trainer.validity_samples=10", "trainer.validity_samples=10: it samples SMILES, so it needs a language-model run "
     "(no task) of a causal model with the smiles tokenizer (allowed: 0 for this run)"),
    # an unquoted regex is Hydra syntax: the error says how to quote it
    (r"data.label_pattern=^(\S+?)-[MSU]\b",
     "quote the value for Hydra, inside shell quotes: \"data.label_pattern='^(\\S+?)-[MSU]\\b'\""),
])
def test_bad_override_is_one_line_with_status_2(override, expected, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert entry.main([override]) == 2
    err = capsys.readouterr().err
    assert expected in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "outputs").exists()  # stopped before Hydra made a run directory


def test_a_bad_value_inside_a_sweep_is_caught_before_any_job(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert entry.main(["-m", "model.pos=rope,bogus"]) == 2
    assert "model.pos='bogus'" in capsys.readouterr().err
    assert not (tmp_path / "multirun").exists()


def test_biotf_train_is_train_py(capsys, monkeypatch, tmp_path):
    from biotf.cli import main as biotf_cli

    monkeypatch.chdir(tmp_path)
    assert biotf_cli(["train", "model.pos=foo"]) == 2
    assert "biotf train: error: invalid config model.pos='foo'" in capsys.readouterr().err


def test_tensorboard_logger_needs_its_package_or_works(capsys, monkeypatch, tmp_path):
    import importlib.util

    monkeypatch.chdir(tmp_path)
    if importlib.util.find_spec("tensorboard") or importlib.util.find_spec("tensorboardX"):
        assert composed("trainer.logger=tensorboard").trainer.logger == "tensorboard"
    else:
        assert entry.main(["trainer.logger=tensorboard"]) == 2
        assert "pip install 'biotf[tensorboard]'" in capsys.readouterr().err
