"""End-to-end runs in-process with a tiny model: run directory layout, checkpoints, export, bad data."""

from __future__ import annotations

import csv
import json
import shutil

import pytest
import torch

from biotf.checkpoint import ensure_same_tokenizer
from biotf.api import Model
from biotf.cli import main as biotf_cli
from biotf.errors import CheckpointError
from biotf.tokenizers import build_tokenizer
from biotf.entry import train as entry

from training_helpers import TINY


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, cache_dir):
    """One tiny default-experiment run made the way a user makes it: `train.py` in a working directory."""
    work = tmp_path_factory.mktemp("work")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(work)
        assert entry.main([*TINY, f"data.cache_dir={cache_dir}"]) == 0
    runs = list((work / "outputs" / "protein_mlm").iterdir())
    assert len(runs) == 1
    return runs[0]


def test_run_directory_layout(run_dir):
    assert run_dir.parent.name == "protein_mlm" and len(run_dir.name) == len("2026-11-29_18-00-00_123456")
    for name in ("checkpoints/last.ckpt", "checkpoints/best.ckpt", "tokenizer.json", "config.yaml", "metrics.csv",
                 "summary.json", "summary.txt"):
        assert (run_dir / name).is_file(), name
    assert not list(run_dir.rglob("*.tmp"))  # atomic writes leave no temporaries behind
    assert not (run_dir / "run.lock").exists()  # released when the run ends
    resolved = (run_dir / "config.yaml").read_text()
    assert "${" not in resolved and "experiment: protein_mlm" in resolved
    with open(run_dir / "metrics.csv") as handle:
        columns = set(next(csv.reader(handle)))
    assert {"train/loss", "train/ppl", "train/acc", "train/lr", "train/tokens_per_s", "val/loss", "val/ppl",
            "val/acc"} <= columns


def test_summary_reports_val_loss_and_unigram_baseline(run_dir):
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["objective"] == "mlm"
    assert 0 < summary["unigram_baseline"] < 4 and 0 < summary["final_val_loss"] < 10
    assert summary["beats_baseline_by"] == pytest.approx(summary["unigram_baseline"] - summary["final_val_loss"])
    text = (run_dir / "summary.txt").read_text()
    assert "final validation loss" in text and "unigram baseline" in text


def test_checkpoint_holds_config_tokenizer_and_fingerprint(run_dir):
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    payload = checkpoint["biotf"]
    saved = json.loads((run_dir / "tokenizer.json").read_text())
    assert saved["fingerprint"] == payload["tokenizer"]["fingerprint"] and "tokenizer_fingerprint" not in payload
    assert payload["model"]["d_model"] == 32 and payload["model"]["vocab_size"] == 33
    assert checkpoint["global_step"] == 4


def test_export_round_trip_gives_identical_logits(run_dir, tmp_path):
    assert biotf_cli(["export-model", str(run_dir), str(tmp_path / "exported")]) == 0
    assert {p.name for p in (tmp_path / "exported").iterdir()} == {"model.safetensors", "config.json", "tokenizer.json"}
    loaded = Model.load(run_dir)
    model, tokenizer = loaded.network, loaded.tokenizer
    loaded = Model.load(tmp_path / "exported")
    exported, exported_tokenizer = loaded.network, loaded.tokenizer
    from_ckpt = Model.load(run_dir / "checkpoints" / "best.ckpt").network
    assert exported_tokenizer.fingerprint == tokenizer.fingerprint
    ids = torch.tensor([tokenizer.encode("MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ")])
    with torch.no_grad():
        reference = model(ids).logits
        assert torch.equal(exported(ids).logits, reference)
        assert torch.equal(from_ckpt(ids).logits, reference)


def test_export_refuses_a_non_empty_directory(run_dir, tmp_path, capsys):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    assert biotf_cli(["export-model", str(run_dir), str(tmp_path / "taken")]) == 2
    assert "not empty" in capsys.readouterr().err


def test_a_different_tokenizer_is_refused_naming_both_fingerprints(run_dir):
    other = build_tokenizer({"kind": "protein", "rare_residues": "to_x"})
    stored = json.loads((run_dir / "tokenizer.json").read_text())["fingerprint"]
    with pytest.raises(CheckpointError) as error:
        ensure_same_tokenizer(Model.load(run_dir).tokenizer.fingerprint, other, str(run_dir))
    assert stored in str(error.value) and other.fingerprint in str(error.value)


def test_resuming_a_damaged_checkpoint_stops_before_training(run_dir, cache_dir, tmp_path, monkeypatch, capsys):
    """100 zeroed bytes inside a weight: refused by its CRC-32, by Model.load and by a resume alike."""
    damaged = tmp_path / "damaged.ckpt"
    data = bytearray((run_dir / "checkpoints" / "last.ckpt").read_bytes())
    embedding = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]["model.embed.weight"]
    start = data.find(embedding.numpy().tobytes()) + 256
    data[start:start + 100] = bytes(100)
    damaged.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=f"{damaged} is damaged"):
        Model.load(damaged)
    monkeypatch.chdir(tmp_path)
    assert entry.main([*TINY, f"data.cache_dir={cache_dir}", f"ckpt_path={damaged}"]) == 2
    err = capsys.readouterr().err
    assert f"train: error: {damaged} is damaged: its content has CRC-32" in err and "Traceback" not in err, err
    assert not list((tmp_path / "outputs").rglob("*.ckpt"))


def test_resuming_with_a_different_tokenizer_stops_before_training(run_dir, cache_dir, tmp_path, monkeypatch, capsys):
    """A run's checkpoint: the setting differs from its config.yaml (`rundir.check_resume`); a loose copy of it,
    with no run beside it: the tokenizer's fingerprint differs from the one the checkpoint records."""
    monkeypatch.chdir(tmp_path)
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    loose = tmp_path / "loose.ckpt"
    shutil.copy(ckpt, loose)
    for path, expected in ((ckpt, "tokenizer.rare_residues ('keep' -> 'to_x')"), (loose, "tokenizer mismatch")):
        status = entry.main([*TINY, f"data.cache_dir={cache_dir}", f"ckpt_path={path}", "tokenizer.rare_residues=to_x"])
        assert status == 2
        err = capsys.readouterr().err
        assert expected in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("content, overrides, expected", [
    ("", ["data.path={path}"], "the file is empty"),
    ("id,smiles\na,CCO\n", ["data.path={path}", "data.column=sequence"], "sequence"),
])
def test_bad_data_stops_with_one_line(content, overrides, expected, tmp_path, monkeypatch, capsys):
    path = tmp_path / ("empty.fasta" if not content else "molecules.csv")
    path.write_text(content)
    monkeypatch.chdir(tmp_path)
    status = entry.main([*TINY, f"data.cache_dir={tmp_path / 'cache'}", *[o.format(path=path) for o in overrides]])
    assert status == 2
    err = capsys.readouterr().err.strip()
    assert expected in err and str(path) in err and "Traceback" not in err
    assert not list((tmp_path / "outputs").rglob("*.ckpt"))


def test_printed_embed_command_runs(run_dir, tmp_path):
    """The command a finished run prints to embed its data is one a user can paste as it is."""
    import shlex

    from biotf.training.summary import next_steps

    sequences = tmp_path / "seqs.csv"
    sequences.write_text("name,seq\np1,MKTAYIAKQR\np2,GAVLIPFW\n")
    line = next(x for x in next_steps(run_dir, str(sequences), "seq", "name").splitlines() if x.startswith("embed"))
    command = shlex.split(line.split(":", 1)[1])
    assert command[:2] == ["biotf", "embed"]
    assert biotf_cli([*command[1:], "--no-progress"]) == 0
    output = run_dir / "embeddings.h5ad"
    import anndata

    assert list(anndata.read_h5ad(output).obs_names) == ["p1", "p2"]
    output.unlink()
