"""Commands biotf prints for the user to paste work when pasted, whatever the paths hold: spaces, quotes, `=`,
non-ASCII characters. Each is checked by pasting it: split as a shell splits it, then run (Hydra parses the
overrides of train.py as it does from a terminal)."""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest
import torch
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf

from biotf.cli import main
from biotf.entry import train as entry
from biotf.training.hints import hydra_override
from biotf.training.rundir import RunDirectoryError, check_run_dir
from biotf.training.summary import next_steps
from test_training_rundir import last, terminated
from training_helpers import TINY, finetune_overrides, write_proteins

AWKWARD = ["runs with spaces", "ré-sumé", "a=b", "it's", 'say "hi"', "a,b", "[x]", "${oc.env:HOME}", "back\\slash",
           "tab\there", "sweep*?", "{a: 1}", "trailing\\"]


@pytest.mark.parametrize("name", AWKWARD)
def test_a_hydra_override_reads_back_the_path_it_was_given(name):
    path = f"/data/{name}/checkpoints/last.ckpt"
    pasted = shlex.split(shlex.quote(hydra_override("ckpt_path", path)))  # through the shell first
    override = OverridesParser.create().parse_override(pasted[0])
    assert override.key_or_group == "ckpt_path" and not override.is_sweep_override()
    assert OmegaConf.create({"value": override.value()}).value == path  # interpolations stay literal


def test_a_plain_path_is_printed_as_it_is():
    assert hydra_override("ckpt_path", "outputs/run_1/checkpoints/last.ckpt") == \
        "ckpt_path=outputs/run_1/checkpoints/last.ckpt"
    assert hydra_override("x", "true") == "x='true'" and hydra_override("x", "12") == "x='12'"  # kept strings


def test_the_resume_command_printed_on_sigterm_resumes_when_pasted(tmp_path, cache_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "my runs, é" / "run 'one'=1"
    fasta = write_proteins(tmp_path / "proteins.fasta")
    common = [*TINY, f"data.path={fasta}", f"data.cache_dir={cache_dir}", "trainer.max_steps=6"]
    stopped = terminated(tmp_path, "step:2", [*common, hydra_override("hydra.run.dir", run_dir)])
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    message = stopped.stderr.strip().splitlines()[-1]
    command = message.partition("; resume with: ")[2]
    words = shlex.split(command)
    assert words[0] == "python" and words[1].endswith("train.py"), command
    assert entry.main(words[2:]) == 0  # no hydra.run.dir in it: the run continues in its own directory
    assert last(run_dir)["global_step"] == 6 and (run_dir / "summary.json").is_file()
    assert not (tmp_path / "outputs").exists()


def test_a_used_run_directory_names_a_resume_override_that_parses(tmp_path):
    run_dir = tmp_path / "über run, 1"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("seed: 0\n")
    with pytest.raises(RunDirectoryError) as refused:
        check_run_dir(run_dir, None)
    pasted = shlex.split(str(refused.value).partition("resume it with ")[2].partition(" or choose")[0])
    assert len(pasted) == 1
    assert OverridesParser.create().parse_override(pasted[0]).value() == str(run_dir / "checkpoints" / "last.ckpt")


def test_the_next_steps_after_training_paste_as_printed(tmp_path):
    run_dir, data = tmp_path / "run dir é", tmp_path / "my data" / "in put.csv"
    lines = dict(line.split(":", 1) for line in next_steps(run_dir, str(data), "seq uence", "the id").splitlines())
    assert shlex.split(lines["export it"]) == ["biotf", "export-model", str(run_dir), str(run_dir / "export")]
    assert shlex.split(lines["embed with it"]) == [
        "biotf", "embed", "--model", str(run_dir), "--input", str(data), "--column", "seq uence", "--id-column",
        "the id", "--output", str(run_dir / "embeddings.h5ad")]


@pytest.mark.slow
def test_the_predict_command_printed_after_fine_tuning_runs_when_pasted(pretrained, tmp_path, capsys):
    data = tmp_path / "données d'essai" / "labelled set.csv"
    data.parent.mkdir()
    shutil.copy(pretrained / "labelled.csv", data)
    run_dir = tmp_path / "fine tune, é"
    overrides = [o for o in finetune_overrides(pretrained, "data.label_column=label", "trainer.max_steps=4")
                 if not o.startswith("data.path=")]
    assert entry.main([*overrides, hydra_override("data.path", data), hydra_override("hydra.run.dir", run_dir)]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("predict with it: "))
    words = shlex.split(line.removeprefix("predict with it: "))
    assert words[:2] == ["biotf", "predict"] and Path(words[words.index("--input") + 1]) == data
    assert main(words[1:]) == 0
    assert (run_dir / "predictions.tsv").is_file()
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 4
