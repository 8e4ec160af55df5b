"""`biotf score proteingym` over two assays in ProteinGym's layout (derived from the shipped BLAT_ECOLX_Jacquier_2013:
its single mutants at positions 24-60, and double mutants made of pairs of them): one row per assay with the five
metrics computed on that assay's own scores; a run SIGKILLed after its first assay, rerun, keeps that assay and
writes the table of an uninterrupted run; the published column sits beside biotf's with the difference."""

from __future__ import annotations

import math
import os
import signal
from pathlib import Path

import pytest

from biotf.cli import main
from biotf.scoring.fitness_metrics import fitness_metrics
from forked_process import Forked
from torchrun_helpers import SEVERAL_PROCESSES

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "proteins" / "proteingym"
PUBLISHED = SHARED / "DMS_substitutions_Spearman_DMS_level.csv"
SINGLES, DOUBLES = "BLAT_ECOLX_Jacquier_2013", "BLAT_DOUBLES"


@pytest.fixture(scope="module")
def assays(tmp_path_factory, random_esm, save_esm):
    pandas = pytest.importorskip("pandas")
    if not (SHARED / f"{SINGLES}.csv.gz").is_file():
        pytest.skip(f"{SHARED} is not here")
    root = tmp_path_factory.mktemp("proteingym")
    model = save_esm(random_esm(seed=5, max_positions=1026), root / "esm2")
    wild_type = "".join((SHARED / "BLAT_ECOLX_wt.fasta").read_text().splitlines()[1:])
    table = pandas.read_csv(SHARED / f"{SINGLES}.csv.gz")
    table = table[table.mutant.str[1:-1].astype(int) <= 60].reset_index(drop=True)
    (root / "assays").mkdir()
    table.to_csv(root / "assays" / f"{SINGLES}.csv", index=False)
    first, second = table.iloc[::2].reset_index(drop=True), table.iloc[1::2].reset_index(drop=True)
    keep = first.mutant.str[1:-1] != second.mutant.str[1:-1]
    doubles = pandas.DataFrame({
        "mutant": (first.mutant + ":" + second.mutant)[keep],
        "DMS_score": (first.DMS_score + second.DMS_score)[keep],
        "DMS_score_bin": (first.DMS_score_bin & second.DMS_score_bin)[keep]})
    doubles.to_csv(root / "assays" / f"{DOUBLES}.csv", index=False)
    (root / "reference.csv").write_text(
        "DMS_id,DMS_filename,target_seq\n"
        f"{SINGLES},{SINGLES}.csv,{wild_type}\n{DOUBLES},{DOUBLES}.csv,{wild_type}\nNOT_HERE,NOT_HERE.csv,MKT\n")
    return root, model


def command(root: Path, model: Path, output: Path, *extra: str) -> list[str]:
    return ["score", "proteingym", "--model", str(model), "--assays", str(root / "assays"), "--reference-file",
            str(root / "reference.csv"), "--output", str(output), "--no-progress", *extra]


def killed_after_the_first_assay(argv: list[str]) -> int:
    """The command, SIGKILLed as the second assay starts (the first one is finished and recorded by then)."""
    from biotf.scoring import assays

    scored = assays.assay_row
    calls = []

    def once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        return scored(*args, **kwargs)

    assays.assay_row = once
    return main(argv)


def test_a_killed_run_rerun_equals_an_uninterrupted_one(assays, tmp_path, capsys, monkeypatch):
    pandas = pytest.importorskip("pandas")
    root, model = assays
    whole, resumed = tmp_path / "whole.csv", tmp_path / "resumed.csv"
    published = ("--reference-table", str(PUBLISHED), "--published", "ESM2 (8M)", "Site-Independent")
    assert main(command(root, model, whole, *published)) == 0
    child = Forked(killed_after_the_first_assay, command(root, model, resumed, *published))
    assert child.wait(timeout=600) == -signal.SIGKILL
    assert not resumed.exists() and (tmp_path / "resumed.csv.parts" / "part-000000.json").is_file()

    from biotf.scoring import assays as module
    scored = []
    original = module.assay_row
    monkeypatch.setattr(module, "assay_row", lambda *a, **k: scored.append(a[2].id) or original(*a, **k))
    capsys.readouterr()
    assert main(command(root, model, resumed, *published)) == 0
    err = capsys.readouterr().err
    assert scored == [DOUBLES]  # the singles were kept
    assert resumed.read_bytes() == whole.read_bytes()
    assert not (tmp_path / "resumed.csv.parts").exists()
    assert "2 assays of the 3 in" in err and "1 without a file here, not scored" in err
    assert "(1 kept from an interrupted run)" in err and "(1 assay not in it)" in err
    assert f"{SINGLES}: " in err and f"{DOUBLES}: " in err  # every assay's metrics, the kept one's too

    table = pandas.read_csv(whole)
    assert list(table.DMS_id) == [SINGLES, DOUBLES]
    assert list(table.columns) == ["DMS_id", "variants", "multi_mutants", "method", "precision", "windows", "window", "Spearman",
                                   "AUC", "MCC", "NDCG", "Top_recall", "ESM2 (8M) (published)", "Spearman - ESM2 (8M)",
                                   "Site-Independent (published)", "Spearman - Site-Independent"]
    singles, doubles = table.iloc[0], table.iloc[1]
    assert singles["ESM2 (8M) (published)"] == 0.362 and singles["Site-Independent (published)"] == 0.456
    assert singles["Spearman - ESM2 (8M)"] == pytest.approx(singles.Spearman - 0.362, abs=1e-12)
    assert math.isnan(doubles["ESM2 (8M) (published)"]) and math.isnan(doubles["Spearman - ESM2 (8M)"])
    assert doubles.multi_mutants == doubles.variants > 0 and singles.multi_mutants == 0
    assert set(table.method) == {"masked-marginal"} and set(table.windows) == {1} and set(table.window) == {"whole"}


def test_each_row_holds_the_metrics_of_the_assays_own_scores(assays, tmp_path, capsys):
    """The row of an assay equals the metrics of `score --variants` on that assay alone (same model, same method)."""
    pandas = pytest.importorskip("pandas")
    root, model = assays
    output = tmp_path / "table.csv"
    assert main(command(root, model, output, "--method", "masked-marginal-joint")) == 0
    row = pandas.read_csv(output).set_index("DMS_id").loc[DOUBLES]
    scores = tmp_path / "doubles.csv"
    wild_type = SHARED / "BLAT_ECOLX_wt.fasta"
    assert main(["score", "--model", str(model), "--variants", str(root / "assays" / f"{DOUBLES}.csv"),
                 "--reference", str(wild_type), "--output", str(scores), "--method", "masked-marginal-joint",
                 "--no-progress"]) == 0
    variants = pandas.read_csv(scores)
    expected = fitness_metrics(variants.score, variants.DMS_score, variants.DMS_score_bin)
    said = ", ".join(f"{name} {value:.3f}" for name, value in expected.items())
    assert f"ProteinGym metrics: {said}" in capsys.readouterr().err  # score --variants prints them too
    assert row.method == "masked-marginal-joint"
    for name, value in expected.items():
        assert row[name] == pytest.approx(value, abs=1e-12), name


def test_bad_inputs_are_one_line(assays, tmp_path, capsys):
    root, model = assays
    stray = tmp_path / "stray.csv"
    stray.write_text("mutant,DMS_score\nH24Y,1.0\n")
    base = ["score", "proteingym", "--model", str(model), "--reference-file", str(root / "reference.csv"),
            "--output", str(tmp_path / "t.csv")]
    assert main([*base, "--assays", str(stray)]) == 2
    assert "assay file" in capsys.readouterr().err
    assert main([*base, "--assays", str(root / "assays"), "--reference-table", str(PUBLISHED),
                 "--published", "ESM3 (huge)"]) == 2
    assert "ESM3 (huge)" in capsys.readouterr().err
    assert main([*base, "--assays", str(root / "assays"), "--published", "ESM2 (8M)"]) == 2
    assert "--reference-table" in capsys.readouterr().err


def test_the_python_api_returns_the_commands_table(assays, tmp_path):
    pandas = pytest.importorskip("pandas")
    import biotf
    from biotf.scoring.assays import AssaySummary

    root, model = assays
    output = tmp_path / "table.csv"
    published = ("--reference-table", str(PUBLISHED), "--published", "ESM2 (8M)")
    assert main(command(root, model, output, *published)) == 0
    summary = AssaySummary()
    table = biotf.Model.load(model).score_assays(root / "assays", root / "reference.csv", reference_table=PUBLISHED,
                                                 published=["ESM2 (8M)"], summary=summary)
    pandas.testing.assert_frame_equal(table, pandas.read_csv(output), check_exact=False, rtol=0, atol=1e-12)
    assert [line.split(":")[0] for line in summary.lines()] == [SINGLES, DOUBLES]
    assert "2 assays of the 3" in summary.summary()


@SEVERAL_PROCESSES
def test_two_processes_under_torchrun_write_the_one_process_table(assays, tmp_path):
    """The assays dealt to two ranks (gloo on CPU): the table of one process, byte for byte."""
    import subprocess

    from torchrun_helpers import free_port, torchrun

    root, model = assays
    repository = Path(__file__).resolve().parents[2]
    assert main(command(root, model, tmp_path / "one.csv")) == 0
    environment = {k: v for k, v in os.environ.items()
                   if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    launch = [*torchrun("--nproc-per-node", "2", "--master-port", str(free_port())), "-m", "biotf",
              *command(root, model, tmp_path / "two.csv")]
    result = subprocess.run(launch, cwd=tmp_path, capture_output=True, text=True, timeout=600,
                            env={**environment, "PYTHONPATH": str(repository), "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "two.csv").read_bytes() == (tmp_path / "one.csv").read_bytes()
    assert result.stderr.count("biotf score proteingym: ->") == 1  # rank 0 alone reports


def test_a_target_longer_than_the_window_is_windowed_and_said(assays, tmp_path, capsys):
    """Every variant is scored, by default in ProteinGym's window centred on its position (`--window owned`: the
    window that owns it); the row and the summary say how, and the scores differ between the two."""
    pandas = pytest.importorskip("pandas")
    root, model = assays
    tables = {}
    for window in ("centred", "owned"):
        output = tmp_path / f"{window}.csv"
        assert main(command(root, model, output, "--max-length", "128", "--window", window)) == 0
        tables[window] = table = pandas.read_csv(output)
        windows = table.windows.iloc[0]
        assert windows > 1 and set(table.windows) == {windows} and set(table.window) == {window}
        assert list(table.variants) == [len(pandas.read_csv(root / "assays" / f"{name}.csv")) for name in table.DMS_id]
        assert f"target longer than the model: {window} windows" in capsys.readouterr().err
    assert (tables["centred"].Spearman - tables["owned"].Spearman).abs().max() > 1e-6
