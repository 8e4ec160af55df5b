"""Pre-LN vs Post-LN: the report on synthetic runs (warmup gaps, divergence marks) and the command's refusals."""

from __future__ import annotations

import json

import pytest

from biotf.cli import main
from biotf.errors import ConfigError
from biotf_recipes.experiments import norm_placement, run_experiment
from biotf_recipes.experiments.runs import compose_config, read_run
from experiment_helpers import config, healthy, write_run


def test_report_shows_warmup_gaps_and_divergence(tmp_path):
    base = compose_config(["experiment=norm_placement"])
    warmups = (0, base.optim.warmup_steps)
    runs = {}
    for lr in norm_placement.LEARNING_RATES:
        for norm_position in norm_placement.NORM_POSITIONS:
            for warmup in warmups:
                # Post-LN without warmup: worse at the low lr, exploded at the high one.
                scale = 1.2 if (norm_position, warmup) == ("post", 0) else 1.0
                rows = healthy(scale)
                if (norm_position, warmup, lr) == ("post", 0, max(norm_placement.LEARNING_RATES)):
                    rows = [(10, 3.0, 2.5), (20, 2.0, 2.0), (30, 9.0, 9.0)]
                directory = tmp_path / "runs" / f"{lr}-{norm_position}-{warmup}"
                write_run(directory, config("rope", 0, lr), rows)
                (directory / "summary.json").write_text(json.dumps({"beats_baseline_by": 0.25}))
                runs[norm_position, warmup, lr] = [read_run(directory)]
    report = norm_placement.write_report(tmp_path, runs, (0,), base, quick=False)
    text = report.read_text()
    gaps = {tuple(line.split(" | ")[:2]): line.split(" | ")[2] for line in text.splitlines()
            if line.startswith("| 0.00")}
    low, high = (f"| {lr:g}" for lr in norm_placement.LEARNING_RATES)
    assert gaps[low, "post-LN"] == "+0.4400 |" and gaps[low, "pre-LN"] == "+0.0000 |"
    assert gaps[high, "post-LN"] == "n/a (a run diverged) |"
    assert text.count("DIVERGED 1/1: val/loss exploded") == 1 and "Seeds: 1 (0)" in text
    assert "| pre | 0 | 0.001 | 2.2000 | 2.2000 | 0.2500 | ok |" in text
    assert (tmp_path / "norm_placement.png").read_bytes()[:4] == b"\x89PNG"


def test_unknown_experiment_and_empty_seeds_are_refused(tmp_path, capsys):
    with pytest.raises(ConfigError, match="allowed: extrapolation | norm-placement"):
        run_experiment("attention", tmp_path, (0,))
    with pytest.raises(ConfigError, match="invalid seeds="):
        run_experiment("norm-placement", tmp_path, ())
    with pytest.raises(SystemExit):
        main(["experiment", "attention"])
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "seeds"), [([], (0, 1, 2)), (["--quick"], (0,)), (["--seeds", "4", "5"], (4, 5)),
                                             (["--quick", "--seeds", "7"], (7,))])
def test_default_seeds_show_a_spread_and_quick_runs_one(argv, seeds, tmp_path, monkeypatch):
    called = {}

    def fake_run(name, out, run_seeds, quick):
        called.update(name=name, seeds=run_seeds, quick=quick)
        return out / "report.md"

    monkeypatch.setattr("biotf_recipes.experiments.run_experiment", fake_run)
    assert main(["experiment", "norm-placement", "--out", str(tmp_path), *argv]) == 0
    assert called == {"name": "norm-placement", "seeds": seeds, "quick": "--quick" in argv}
