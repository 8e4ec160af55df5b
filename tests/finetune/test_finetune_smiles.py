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


@pytest.fixture
def bbbp_slice(shared_data, tmp_path) -> Path:
    """BBBP's first 80 molecules as published: numbers 60 and 62 are SMILES RDKit cannot parse."""
    lines = (shared_data / "smiles/molnet_bbbp.csv").read_text().splitlines()[:81]
    path = tmp_path / "bbbp80.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_bbbp_scaffold_split_refuses_unparsable_smiles_naming_the_option(smiles_run, bbbp_slice, tmp_path,
                                                                       monkeypatch, capsys):
    pytest.importorskip("rdkit")
    monkeypatch.chdir(tmp_path)
    status = entry.main([*FINETUNE, f"init_from={smiles_run}", f"data.path={bbbp_slice}", "data.label_column=p_np",
                         "data.id_column=num", "finetune.split.method=scaffold", "hydra.run.dir=strict"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1, err
    assert "RDKit cannot parse SMILES 'O=N([O-])C1=C(CN=C1NCCSCc2ncccc2)Cc3ccccc3' (record '60')" in err
    assert "set data.invalid_smiles=skip to leave such records out" in err


def test_bbbp_scaffold_split_as_the_readme_runs_it_lists_what_it_left_out(smiles_run, bbbp_slice, tmp_path,
                                                                         monkeypatch, capsys):
    """The README's BBBP command (data.invalid_smiles=skip), on 80 of its molecules: the two unparsable ones are
    in no split, counted and listed by id; the others are split as a file without them would be."""
    pytest.importorskip("rdkit")
    import csv

    from biotf.data.splits import assign, read_sides, scaffold_groups
    from biotf.finetune.finetune_run import INVALID_SMILES_LEFT_OUT

    monkeypatch.chdir(tmp_path)
    status = entry.main([*FINETUNE, f"init_from={smiles_run}", f"data.path={bbbp_slice}", "data.label_column=p_np",
                         "data.id_column=num", "finetune.split.method=scaffold", "data.invalid_smiles=skip",
                         "finetune.tokenizer_options.unknown=to_unk", "hydra.run.dir=bbbp"])
    out = capsys.readouterr().out
    assert status == 0
    summary = json.loads((tmp_path / "bbbp" / "finetune.json").read_text())
    assert summary["left_out_ids"] == {INVALID_SMILES_LEFT_OUT: ["60", "62"]}
    assert summary["dropped"][INVALID_SMILES_LEFT_OUT] == 2 and sum(summary["split"]["records"].values()) == 78
    assert f"left out, {INVALID_SMILES_LEFT_OUT}: 60, 62" in out
    with open(bbbp_slice, newline="") as handle:
        kept = [row for row in csv.DictReader(handle) if row["num"] not in ("60", "62")]
    expected = assign(scaffold_groups([r["smiles"] for r in kept], [r["num"] for r in kept]), 0.1, 0.1,
                      summary["split"]["seed"])
    assert read_sides(tmp_path / "bbbp" / "split.tsv") == dict(zip([r["num"] for r in kept], expected.tolist()))


def test_repeated_ids_name_the_columns_that_are_unique(smiles_run, tmp_path, monkeypatch, capsys):
    """BBBP's `name` repeats names with different SMILES: the refusal names `num`, whose values are unique."""
    path = tmp_path / "names.csv"
    path.write_text("num,name,p_np,smiles\n1,12,1,CCO\n2,15,0,CCN\n3,12,1,c1ccccc1\n")
    monkeypatch.chdir(tmp_path)
    assert entry.main([*FINETUNE, f"init_from={smiles_run}", f"data.path={path}", "data.label_column=p_np",
                       "data.id_column=name", "hydra.run.dir=names"]) == 2
    err = capsys.readouterr().err
    assert "records 1 and 3 have the same id '12'" in err and "data.id_column=<column>" in err
    assert "columns with a distinct value in every record: num)" in err and err.count("\n") == 1
