"""Every file a fine-tuning run writes appears complete under its final name or not at all: a writer that dies
half-way through (a killed process, a full disk) leaves neither a partial file nor a temporary behind."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from biotf.tokenizers import build_tokenizer
from biotf.data.splits import write_split
from biotf.finetune.results import FinetuneSummary, write_predictions
from biotf.finetune.labelled import LabelledSet
from biotf.training.run import write_run_files


@pytest.fixture
def dies_mid_write(monkeypatch):
    """Path.write_text writes the first half of its text, then fails, as a process killed mid-write would."""
    def half(self: Path, text: str, *args, **kwargs) -> int:
        with open(self, "w", encoding="utf-8") as handle:
            handle.write(text[:len(text) // 2])
        raise OSError("killed mid-write")

    monkeypatch.setattr(Path, "write_text", half)


def labelled() -> LabelledSet:
    return LabelledSet(ids=["a", "b"], sequences=["MK", "MW"], token_ids=[np.arange(4)] * 2, labels=[0, 1],
                       groups=None, classes=["no", "yes"], counts=Counter())


def summary(dropped: dict[str, int] | None = None, cropped: int = 0) -> FinetuneSummary:
    return FinetuneSummary(experiment="finetune", task="classification", mode="full", init_from="base",
                           init_from_resolved="/runs/base", run_dir="/runs/tuned", parameters=10,
                           trainable_parameters=10, steps=1, train_seconds=1.0, max_length=64,
                           split={"method": "random", "groups": 2, "records": {"train": 2}}, dropped=dropped or {},
                           cropped=cropped, best_checkpoint="best.ckpt", best_step=1, validation={"loss": 0.5},
                           test={"loss": 0.5}, classes=["no", "yes"])


def test_the_summary_tells_records_left_out_from_records_kept_but_cut():
    text = summary({"unlabelled": 1, "longer than max_length, dropped": 2}, cropped=3).text()
    assert "left out: 1 unlabelled, 2 longer than max_length, dropped" in text
    assert "kept but cut: 3 longer than max_length, cut to the first max_length tokens" in text
    assert "left out" not in summary(cropped=3).text()


WRITERS = {
    "split.tsv": lambda run: write_split(run / "split.tsv", ["a", "b"], np.array(["train", "test"]),
                                         np.array(["a", "b"])),
    "predictions_test.tsv": lambda run: write_predictions(run / "predictions_test.tsv", labelled(), np.arange(2),
                                                          [np.array(1), np.array(1)], "classification"),
    "finetune.json": lambda run: summary().write(run),
    "config.yaml, tokenizer.json": lambda run: write_run_files(run, {"seed": 0}, build_tokenizer({"kind": "protein"})),
}


@pytest.mark.parametrize("name", WRITERS)
def test_a_writer_killed_mid_write_leaves_nothing(name, tmp_path, dies_mid_write):
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(OSError, match="killed mid-write"):
        WRITERS[name](run)
    assert sorted(p.name for p in run.rglob("*")) == []  # no partial file, no temporary, no staging directory


@pytest.mark.parametrize("name", WRITERS)
def test_a_writer_leaves_only_its_files_with_the_users_umask(name, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    WRITERS[name](run)
    written = sorted(p.name for p in run.iterdir())
    assert written == sorted(name.split(", "))
    assert all((run / n).stat().st_mode & 0o777 == 0o666 & ~_umask() for n in written)


def test_written_predictions_and_split_read_back(tmp_path):
    WRITERS["predictions_test.tsv"](tmp_path)
    WRITERS["split.tsv"](tmp_path)
    assert (tmp_path / "predictions_test.tsv").read_text() == "id\tlabel\tprediction\na\tno\tyes\nb\tyes\tyes\n"
    assert (tmp_path / "split.tsv").read_text() == "id\tsplit\tgroup\na\ttrain\ta\nb\ttest\tb\n"


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask
