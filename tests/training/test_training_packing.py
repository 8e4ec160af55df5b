"""`data.packing`: a validated DataConfig field mirrored in every conf/data/*.yaml; a packed masked-LM run trains on
packed rows and counts real tokens only; causal runs refuse it in one line."""

from __future__ import annotations

import json

import pytest
import yaml

from biotf.data import prepare_dataset
from biotf.data.packing import PackedBatchSampler
from biotf.resources import CONF_DIR
from biotf.tokenizers import build_tokenizer
from biotf.training import entry
from biotf.training.config import DataConfig
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


def test_a_causal_run_refuses_packing_in_one_line(tmp_path, monkeypatch, capsys):
    fasta = write_proteins(tmp_path / "proteins.fasta")
    monkeypatch.chdir(tmp_path)
    overrides = [*TINY, "model.causal=true", f"data.path={fasta}", f"data.cache_dir={tmp_path / 'cache'}",
                 "data.packing=true", "hydra.run.dir=run"]
    assert entry.main(overrides) == 2
    err = capsys.readouterr().err
    assert "data.packing=True" in err and len(err.strip().splitlines()) == 1
