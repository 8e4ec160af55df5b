"""A SMILES model pretrained on the shipped Lipophilicity sample fine-tunes on other molecules: BBBP's `[Cl]`, `[Na+]`
... are in the base vocabulary every new SMILES tokenizer starts from. `finetune.tokenizer_options` changes a policy
of init_from's tokenizer (never its vocabulary), what it changed is counted in finetune.json and the run's export
keeps it; `tokenizer.*` overrides, which a fine-tuning run cannot use, are refused naming the key that works."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from biotf.entry import train as entry
from training_helpers import TINY

FINETUNE = ["experiment=finetune", "data.column=smiles", "data.label_column=label", "data.max_length=64",
            "trainer.max_steps=2", "trainer.val_check_interval=2", "trainer.enable_progress_bar=false"]


@pytest.fixture(scope="module")
def smiles_run(tmp_path_factory, cache_dir) -> Path:
    """`python train.py experiment=smiles_mlm` with a tiny model, a few steps."""
    work = tmp_path_factory.mktemp("smiles")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(work)
        assert entry.main(["experiment=smiles_mlm", *TINY, f"data.cache_dir={cache_dir}", "hydra.run.dir=run"]) == 0
    return work / "run"


@pytest.fixture
def unusual(tmp_path) -> Path:
    """40 molecules, half with an isotope label outside every vocabulary ([15CH3])."""
    rows = [f"m{n},{'C' * (n + 1)}{'[15CH3]' if n % 2 else 'O'},{n % 2}" for n in range(40)]
    path = tmp_path / "unusual.csv"
    path.write_text("id,smiles,label\n" + "\n".join(rows) + "\n")
    return path


def test_a_smiles_model_fine_tunes_on_bbbp(smiles_run, shared_data, tmp_path, monkeypatch):
    """Before the base vocabulary this stopped at BBBP's first `[Cl]`, not in the vocabulary learned from Lipophilicity."""
    monkeypatch.chdir(tmp_path)
    bbbp = shared_data / "smiles/molnet_bbbp.csv"
    status = entry.main([*FINETUNE, f"init_from={smiles_run}", f"data.path={bbbp}", "data.label_column=p_np",
                         "hydra.run.dir=bbbp"])
    assert status == 0
    summary = json.loads((tmp_path / "bbbp" / "finetune.json").read_text())
    assert sum(summary["split"]["records"].values()) == 2050 and "unknown_to_unk" not in summary["policies"]


def test_tokenizer_options_of_a_fine_tuning_run(smiles_run, unusual, tmp_path, monkeypatch, capsys):
    from biotf.cli import main
    from biotf.checkpoint.task_model import load_task_model
    from biotf.tokenizers import load_tokenizer

    monkeypatch.chdir(tmp_path)
    common = [*FINETUNE, f"init_from={smiles_run}", f"data.path={unusual}"]
    assert entry.main([*common, "hydra.run.dir=strict"]) == 2
    err = capsys.readouterr().err
    assert str(unusual) in err and "record 'm1'" in err and "'[15CH3]' is not in the vocabulary" in err

    assert entry.main([*common, "finetune.tokenizer_options.unknown=to_unk", "hydra.run.dir=lenient"]) == 0
    summary = json.loads((tmp_path / "lenient" / "finetune.json").read_text())
    assert summary["policies"] == {"unknown_to_unk": 20}
    assert "policies: unknown_to_unk=20" in capsys.readouterr().out
    _, tokenizer, _ = load_task_model(tmp_path / "lenient")  # the export keeps the policy it was trained with
    assert tokenizer.unknown == "to_unk" and tokenizer.get_vocab() == load_tokenizer(smiles_run).get_vocab()
    assert main(["predict", "--model", str(tmp_path / "lenient"), "--input", str(unusual), "--column", "smiles",
                 "--output", str(tmp_path / "p.tsv")]) == 0
    assert "unknown_to_unk=20" in capsys.readouterr().err

    assert entry.main([*common, "finetune.tokenizer_options.stop=strip_terminal", "hydra.run.dir=stop"]) == 2
    err = capsys.readouterr().err
    assert "finetune.tokenizer_options.stop='strip_terminal': not an option of tokenizer 'smiles'" in err
    assert "allowed: unknown, whitespace" in err and err.count("\n") == 1
    assert entry.main([*common, "tokenizer.unknown=to_unk", "hydra.run.dir=ignored"]) == 2
    err = capsys.readouterr().err
    assert "finetune.tokenizer_options.unknown=<value>" in err and err.count("\n") == 1
    assert not (tmp_path / "ignored").exists()  # refused before the run directory is made
