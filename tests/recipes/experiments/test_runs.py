"""Reading run directories: curves, final/best values, divergence, grouping of seeds."""

from __future__ import annotations

import math

import pytest
import yaml

import biotf.training.run
from biotf.errors import BiotfError, ConfigError, InputError
from biotf_recipes.experiments.runs import (ERROR_FILE, compose_config, find_runs, group_by_setting, metric_column,
                                            read_run, train_job, varying_keys)
from biotf.training.train_config import to_plain
from experiment_helpers import config, write_run


def test_a_step_logged_twice_keeps_its_last_value(tmp_path):
    run = read_run(write_run(tmp_path / "r", config("rope", 0), [(20, 2.6, 2.5), (20, None, 2.4), (30, 2.3, 2.2)]))
    assert run.curves["val/loss"] == [(20, 2.4), (30, 2.2)]
    assert run.final("val/loss") == 2.2 and run.best("val/loss") == 2.2 and run.last_step == 30
    assert run.divergence is None


@pytest.mark.parametrize("rows, reason", [
    ([(10, 3.0, 2.9), (20, float("nan"), 2.5)], "non-finite train/loss"),
    ([(10, 3.0, 2.9), (20, 2.0, float("inf"))], "non-finite val/loss"),
    ([(10, 3.0, 2.9), (20, 2.0, 2.0), (30, 5.0, 3.1)], "val/loss exploded"),
])
def test_diverged_runs_are_named(tmp_path, rows, reason):
    run = read_run(write_run(tmp_path / "r", config("post", 0), rows))
    assert run.divergence.startswith(reason)


def test_a_small_bump_is_not_divergence(tmp_path):
    run = read_run(write_run(tmp_path / "r", config("rope", 0), [(10, 3.0, 2.0), (20, 2.0, 2.2)]))
    assert run.divergence is None


def test_a_failed_training_is_reported_from_its_error_file(tmp_path):
    directory = tmp_path / "failed"
    directory.mkdir()
    (directory / ERROR_FILE).write_text("RuntimeError: boom\n")
    run = read_run(directory)
    assert run.divergence == "failed: RuntimeError: boom" and run.final("val/loss") is None


def test_find_runs_searches_folders_and_names_bad_paths(sweep, tmp_path):
    assert [p.name for p in find_runs([sweep])] == ["0", "1", "2", "3", "4"]
    assert find_runs([sweep / "1", sweep]) == find_runs([sweep])  # each run once
    with pytest.raises(InputError, match="does not exist"):
        find_runs([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no training run"):
        find_runs([tmp_path / "empty"])


def test_seeds_of_one_setting_share_a_group(sweep):
    runs = [read_run(p) for p in find_runs([sweep])]
    assert varying_keys(runs) == ["model.pos"]  # seed and cache_dir differ too, but are not settings
    groups = group_by_setting(runs)
    assert {label: len(members) for label, members in groups.items()} == {
        "model.pos=rope": 2, "model.pos=alibi": 2, "model.pos=sinusoidal": 1}


def test_metric_names_accept_underscores_and_list_the_allowed_ones():
    assert metric_column("val_loss", ["train/loss", "val/loss"]) == "val/loss"
    assert metric_column("val/loss", ["val/loss"]) == "val/loss"
    with pytest.raises(ConfigError, match=r"invalid metric='val_bleu'.*allowed: train/loss, val/loss"):
        metric_column("val_bleu", ["val/loss", "train/loss"])


def test_best_ignores_non_finite_values(tmp_path):
    run = read_run(write_run(tmp_path / "r", config("rope", 0), [(10, 3.0, 2.5), (20, 2.0, float("nan"))]))
    assert run.best("val/loss") == 2.5 and math.isnan(run.final("val/loss"))


def test_a_finished_run_is_reused_only_for_the_same_config(tmp_path):
    config = compose_config(["experiment=norm_placement"])
    run_dir = tmp_path / "run"
    write_run(run_dir, to_plain(config), [(10, 3.0, 2.9)])
    (run_dir / "summary.json").write_text("{}")
    assert train_job(config, run_dir).final("val/loss") == 2.9  # reused: nothing trained
    other = compose_config(["experiment=norm_placement", "optim.lr=0.01"])
    with pytest.raises(InputError, match=r"another optim.lr \(0.001, now 0.01\)"):
        train_job(other, run_dir)
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["optim"]["lr"] == 0.001


def test_keys_missing_from_older_runs_are_not_settings(tmp_path):
    old = read_run(write_run(tmp_path / "old", config("rope", 0), [(10, 2.0, 2.0)]))
    newer = {**config("alibi", 0), "model": {**config("alibi", 0)["model"], "token_dropout": False}}
    new = read_run(write_run(tmp_path / "new", newer, [(10, 2.0, 2.0)]))
    assert varying_keys([old, new]) == ["model.pos"]


def test_a_training_error_is_recorded_not_raised(tmp_path, monkeypatch):
    """A run stopped by a non-finite loss (or any training error) is reported as failed; the grid goes on."""
    def stopped(config, run_dir):
        raise BiotfError("non-finite training loss nan at step 3")

    monkeypatch.setattr(biotf.training.run, "train", stopped)
    run = train_job(compose_config(["experiment=norm_placement"]), tmp_path / "run")
    assert run.divergence == "failed: BiotfError: non-finite training loss nan at step 3"
    assert (tmp_path / "run" / ERROR_FILE).is_file()
