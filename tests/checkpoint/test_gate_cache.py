"""The precision gate's figures kept across processes (`biotf.checkpoint.gate_cache`): read back for the same weights,
calibration, code and device, said in the precision line, measured again when any of them changes or the file is
damaged, and judged by this run's thresholds."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import biotf
from biotf.checkpoint import gate_cache
from biotf.checkpoint.gate_cache import gate_cache_directory
from biotf.model import precision
from biotf.model.precision import PrecisionError
from tiny_models import save_tiny_protein_model

SEQUENCES = ["MKTAYIAKQR", "ACDEFGHIK"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """The cache on, in a temporary directory; counts the gate's measurements (forwards of the calibration batch)."""
    directory = tmp_path / "gates"
    monkeypatch.setenv("BIOTF_GATE_CACHE", str(directory))
    forwards = []
    measure = precision._calibration_outputs
    monkeypatch.setattr(precision, "_calibration_outputs", lambda *args: forwards.append(1) or measure(*args))
    return directory, forwards


@pytest.fixture
def model_dir(tmp_path):
    return save_tiny_protein_model(tmp_path / "model", max_seq_len=32)


def test_a_second_load_reads_the_figures_and_says_so(cache, model_dir):
    directory, forwards = cache
    first = biotf.Model.load(model_dir, precision="bf16")
    assert len(forwards) == 2 and "earlier run" not in str(first.precision)
    [kept] = directory.glob("*.json")
    record = json.loads(kept.read_text())
    assert set(record) == {"key", "precision", "cosine", "drift"} and record["precision"] == "bf16"
    assert set(record["key"]) == {"model", "calibration", "code", "device"}
    second = biotf.Model.load(model_dir, precision="bf16")
    assert len(forwards) == 2  # nothing measured
    assert second.precision.fidelity.cosine == first.precision.fidelity.cosine
    assert f"measured by an earlier run: {kept}" in str(second.precision)
    assert second.precision.identity() == first.precision.identity()  # the outputs' identity: the same numbers
    np.testing.assert_array_equal(second.embed(SEQUENCES), first.embed(SEQUENCES))


@pytest.mark.parametrize("change", ["weights", "code", "device", "damaged", "foreign"])
def test_figures_are_measured_again_when_what_they_depend_on_changes(cache, model_dir, monkeypatch, change):
    directory, forwards = cache
    biotf.Model.load(model_dir, precision="bf16")
    [kept] = directory.glob("*.json")
    if change == "weights":
        model = biotf.Model.load(model_dir)
        with torch.no_grad():
            model.network.embed.weight[5, 0] += 0.5
        model.save(model_dir.parent / "changed")
        model_dir = model_dir.parent / "changed"
    elif change == "code":
        monkeypatch.setattr(gate_cache, "_code_version", lambda: "biotf 9.9.9")
    elif change == "device":
        monkeypatch.setattr(gate_cache, "_device_description", lambda device: "cpu another one")
    elif change == "damaged":
        kept.write_text("{not json")
    else:  # a file under the right name whose key is not this run's
        record = json.loads(kept.read_text())
        kept.write_text(json.dumps({**record, "key": {**record["key"], "model": "0" * 16}}))
    again = biotf.Model.load(model_dir, precision="bf16")
    assert len(forwards) == 4 and "earlier run" not in str(again.precision)
    if change in ("damaged", "foreign"):  # rewritten with what was measured
        assert json.loads(kept.read_text())["cosine"] == again.precision.fidelity.cosine


def test_kept_figures_are_judged_by_this_runs_gate(cache, model_dir, monkeypatch):
    biotf.Model.load(model_dir, precision="bf16")
    monkeypatch.setitem(precision.COSINE_GATE, "bf16", 1.1)  # no cosine passes
    with pytest.raises(PrecisionError, match="measured by an earlier run"):
        biotf.Model.load(model_dir, precision="bf16")


def test_the_cache_can_be_turned_off_and_defaults_to_the_user_cache(tmp_path, model_dir, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("BIOTF_GATE_CACHE", "off")
    assert gate_cache_directory() is None
    biotf.Model.load(model_dir, precision="bf16")
    assert not (tmp_path / "xdg").exists()
    monkeypatch.delenv("BIOTF_GATE_CACHE")
    assert gate_cache_directory() == tmp_path / "xdg" / "biotf" / "precision-gates"
    biotf.Model.load(model_dir, precision="bf16")
    assert len(list(gate_cache_directory().glob("*.json"))) == 1
