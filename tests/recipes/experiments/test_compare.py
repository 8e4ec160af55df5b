"""`biotf compare`: final-metric table and curves for any set of runs, from the API and the command."""

from __future__ import annotations

import pytest

from biotf.cli import main
from biotf.errors import InputError
from biotf_recipes.experiments.compare import compare
from experiment_helpers import write_run


def table_rows(report: str) -> dict[str, list[str]]:
    rows = [line.strip("|").split(" | ") for line in report.splitlines() if line.startswith("| model.")]
    return {cells[0].strip(): [c.strip() for c in cells[1:]] for cells in rows}


def test_compare_groups_seeds_and_marks_divergence(sweep, tmp_path):
    report, picture = compare([sweep], "val_loss", tmp_path / "out" / "report.md")
    text = report.read_text()
    rows = table_rows(text)
    assert set(rows) == {"model.pos=rope", "model.pos=alibi", "model.pos=sinusoidal"}
    runs, last_step, final, best, status = rows["model.pos=rope"]
    assert runs == "2" and last_step == "30" and status == "ok"
    assert final == "2.3100 (2.2000–2.4200)"  # mean of seeds (2.2, 2.42) with their range
    assert rows["model.pos=sinusoidal"][-1].startswith("DIVERGED 1/1: val/loss exploded")
    assert "Seeds: 2 (0, 1)" in text and f"![val/loss curves]({picture.name})" in text
    assert picture.read_bytes()[:4] == b"\x89PNG"


def test_compare_any_metric(sweep, tmp_path):
    text = compare([sweep / "0", sweep / "2"], "val/acc", tmp_path / "acc.md")[0].read_text()
    assert table_rows(text)["model.pos=alibi"][2] == f"{1 / (2.2 * 0.9):.4f}"


def test_runs_without_config_are_labelled_by_directory(tmp_path):
    for name in ("a", "b"):
        write_run(tmp_path / name, {}, [(10, 2.0, 2.0)])
        (tmp_path / name / "config.yaml").unlink()
    text = compare([tmp_path / "a", tmp_path / "b"], "val_loss", tmp_path / "r.md")[0].read_text()
    assert "| a | 1 |" in text and "| b | 1 |" in text and "Seeds: not recorded" in text


def test_report_must_be_markdown(sweep, tmp_path):
    with pytest.raises(InputError, match="must end in .md"):
        compare([sweep], "val_loss", tmp_path / "report.txt")


def test_command_writes_report_and_refuses_bad_metric_in_one_line(sweep, tmp_path, capsys):
    assert main(["compare", str(sweep), "--metric", "val_loss", "--out", str(tmp_path / "r.md")]) == 0
    assert (tmp_path / "r.md").is_file() and (tmp_path / "r.png").is_file()
    capsys.readouterr()
    assert main(["compare", str(sweep), "--metric", "bleu", "--out", str(tmp_path / "x.md")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "--metric='bleu'" in error and "val/loss" in error


def test_run_paths_are_shown_relative_to_the_working_directory(sweep, tmp_path, monkeypatch):
    monkeypatch.chdir(sweep.parent)
    text = compare(["multirun"], "val_loss", tmp_path / "r.md")[0].read_text()
    assert "`multirun/0`" in text and str(tmp_path) not in text.split("Runs:")[1].split("\n")[0]
