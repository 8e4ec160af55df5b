"""`data.packing`: a validated DataConfig field mirrored in every conf/data/*.yaml; a packed masked-LM run trains on
packed rows and counts real tokens only; a causal run trains and validates on document-masked blocks, and
resumes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml

from biotf.api import Model
from biotf.data import prepare_dataset
from biotf.data.datasets import LengthGroupedBatchSampler
from biotf.data.packing import PackedBatchSampler
from biotf.model.loss import language_model_loss
from biotf.conventions import CONF_DIR
from biotf.tokenizers import build_tokenizer
from biotf.entry import train as entry
from biotf.training.train_config import DataConfig
from biotf.errors import ConfigError

from training_helpers import TINY, write_proteins


@pytest.mark.parametrize("path", sorted((CONF_DIR / "data").glob("*.yaml")), ids=lambda p: p.name)
def test_every_data_yaml_mirrors_the_packing_field(path):
    values = yaml.safe_load(path.read_text())
    assert set(values) <= set(DataConfig.__dataclass_fields__), path.name
    assert values["packing"] is DataConfig.packing


def test_packing_is_a_boolean():
    with pytest.raises(ConfigError, match=r"data.packing='yes' \(allowed: true \| false\)"):
        DataConfig(path="x.fasta", packing="yes")


def test_a_packed_run_counts_the_real_tokens_of_its_packed_batches(tmp_path, monkeypatch):
    fasta = write_proteins(tmp_path / "proteins.fasta")
    monkeypatch.chdir(tmp_path)
    assert entry.main([*TINY, f"data.path={fasta}", f"data.cache_dir={tmp_path / 'cache'}", "data.packing=true",
                       "hydra.run.dir=run"]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    tokenizer = build_tokenizer({"kind": "protein"})
    prepared = prepare_dataset(fasta, tokenizer, tmp_path / "cache", max_length=64)
    sampler = PackedBatchSampler(prepared.train.lengths, 8, 64, seed=0)
    batches = list(sampler)[:summary["steps"]]
    assert summary["steps"] == 4
    assert summary["tokens_seen"] == sum(int(prepared.train.lengths[batch].sum()) for batch in batches)
    assert summary["tokens_seen"] > 4 * 8 * 40  # rows of several records: more than one short record per row


def test_a_packed_causal_run_trains_and_validates_on_document_masked_blocks(tmp_path, monkeypatch):
    """Causal training under packing: blocks of max_length whose records keep to themselves; tokens_seen counts the
    blocks' real tokens, and the reported validation loss is that of the validation blocks masked the same way."""
    fasta = write_proteins(tmp_path / "proteins.fasta")
    monkeypatch.chdir(tmp_path)
    assert entry.main([*TINY, "model.causal=true", f"data.path={fasta}", f"data.cache_dir={tmp_path / 'cache'}",
                       "data.packing=true", "hydra.run.dir=run"]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    loaded = Model.load(tmp_path / "run" / "checkpoints" / "last.ckpt")
    model, tokenizer = loaded.network, loaded.tokenizer
    prepared = prepare_dataset(fasta, tokenizer, tmp_path / "cache", max_length=64, objective="clm", packing=True)
    train = prepared.train
    batches = list(LengthGroupedBatchSampler(np.full(len(train), 64), 8, seed=0))[:summary["steps"]]
    assert summary["steps"] == 4
    assert summary["tokens_seen"] == sum(int((train[i]["segment_ids"] != 0).sum()) for b in batches for i in b)
    validation = [prepared.validation[i] for i in range(len(prepared.validation))]
    ids, labels, segments = (torch.stack([item[key] for item in validation])
                             for key in ("input_ids", "labels", "segment_ids"))
    with torch.no_grad():
        masked = language_model_loss(model, ids, labels, segment_ids=segments).loss
        across = language_model_loss(model, ids, labels, attention_mask=(segments != 0).long()).loss
    assert summary["final_val_loss"] == pytest.approx(float(masked), rel=1e-5)
    assert abs(float(across) - float(masked)) > 1e-3  # the masking is what the reported loss measured


def test_a_bad_packing_value_is_a_one_line_error_naming_it(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert entry.main([*TINY, "model.causal=true", f"data.path={tmp_path / 'x.fasta'}", "data.packing=sometimes",
                       "hydra.run.dir=run"]) == 2
    err = capsys.readouterr().err
    assert "data.packing" in err and "sometimes" in err and len(err.strip().splitlines()) == 1


def test_train_py_runs_and_resumes_a_packed_causal_experiment(tmp_path, monkeypatch, capsys):
    """train.py's entry point on `experiment=smiles_clm data.packing=true`, then resumed from last.ckpt (the script
    itself, under a fresh interpreter, is run by tests/training/test_console.py)."""
    monkeypatch.chdir(tmp_path)
    common = ["experiment=smiles_clm", *TINY, "model.causal=true", "data.packing=true",
              f"data.cache_dir={tmp_path / 'cache'}", "trainer.checkpoint_every_n_steps=3",
              "trainer.val_check_interval=3"]
    assert entry.main([*common, "trainer.max_steps=3", "hydra.run.dir=first"]) == 0, capsys.readouterr().err[-2000:]
    last = tmp_path / "first" / "checkpoints" / "last.ckpt"
    assert entry.main([*common, "trainer.max_steps=6", f"ckpt_path={last}", "hydra.run.dir=resumed"]) == 0, \
        capsys.readouterr().err[-2000:]
    summary = json.loads((tmp_path / "resumed" / "summary.json").read_text())
    assert summary["objective"] == "clm" and summary["steps"] == 6 and summary["final_val_loss"] > 0
