"""A fine-tuned export is checked as a whole whenever it is loaded: every file beside the trunk (the head with its
standardisation statistics, task.json, a LoRA adapter) is covered by a CRC-32, task.json's fields are checked
against their types and the head, and every problem is one line naming the file (`biotf predict`: exit 2)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from biotf.checkpoint import DIGEST_KEY, content_crc32
from biotf.checkpoint.task_export import ADAPTER_FILE, HEAD_FILE, TaskInfo
from biotf.cli import main
from biotf.errors import CheckpointError
from biotf.api import Model
from biotf.checkpoint.task_model import load_task_model, save_task_model


@pytest.fixture(scope="module")
def export(pretrained, tmp_path_factory) -> Path:
    """run/model/: the fixture's trunk with LoRA adapters (merged, the adapter kept) and a 2-class head."""
    from biotf.model.lora import apply_lora, merge_lora, save_adapter
    from biotf.model.heads import TaskModel

    loaded = Model.load(pretrained / "base")
    trunk, tokenizer = loaded.network, loaded.tokenizer
    torch.manual_seed(0)
    apply_lora(trunk, ["qkv"], rank=2, alpha=4)
    for name, parameter in trunk.named_parameters():
        if name.endswith("lora_b"):  # as trained: not the zeros LoRA starts from
            torch.nn.init.normal_(parameter)
    run = tmp_path_factory.mktemp("export") / "run"
    adapter = save_adapter(trunk, run / ".adapter.tmp")
    merge_lora(trunk)
    model = TaskModel(trunk, "classification", 2)
    torch.nn.init.normal_(model.head.weight)
    save_task_model(model, tokenizer, TaskInfo("classification", ["no", "yes"], "mean", 64, "crop", "label"),
                    run / "model", adapter=adapter)
    return run


@pytest.fixture
def run(export, tmp_path) -> Path:
    """A copy of the export's run directory, for a test to damage."""
    return Path(shutil.copytree(export, tmp_path / "run"))


def predict(run: Path, pretrained: Path, tmp_path: Path, capsys) -> tuple[int, str]:
    capsys.readouterr()
    status = main(["predict", "--model", str(run), "--input", str(pretrained / "labelled.csv"), "--id-column", "id",
                   "--output", str(tmp_path / "predictions.tsv")])
    return status, capsys.readouterr().err


def zero_100_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 100] = bytes(100)
    path.write_bytes(bytes(data))


def write_task_json(run: Path, change) -> Path:
    """task.json edited by `change(values)` and stamped with a matching CRC-32, as a file written that way would be:
    what is refused then is its content, not damage."""
    path = run / "model" / "task.json"
    values = json.loads(path.read_text())
    values.pop(DIGEST_KEY)
    change(values)
    path.write_text(json.dumps({**values, DIGEST_KEY: content_crc32(values)}))
    return path


def test_the_export_loads_and_every_file_beside_the_trunk_is_listed_with_its_crc(export):
    task = json.loads((export / "model" / "task.json").read_text())
    assert set(task["files"]) == {HEAD_FILE, ADAPTER_FILE} and DIGEST_KEY in task
    model, _, info = load_task_model(export)
    assert info.classes == ["no", "yes"] and model.head.out_features == 2


@pytest.mark.parametrize("name", [HEAD_FILE, ADAPTER_FILE])
def test_100_zeroed_bytes_beside_the_trunk_are_refused_by_every_loader(name, run, pretrained, tmp_path, capsys):
    zero_100_bytes(run / "model" / name)
    damaged = rf"{run / 'model' / name} is damaged: its content has CRC-32 [0-9a-f]{{8}}, it was written with"
    for load in (load_task_model, Model.load):
        for source in (run, run / "model"):
            with pytest.raises(CheckpointError, match=damaged):
                load(source)
    status, err = predict(run, pretrained, tmp_path, capsys)
    assert status == 2 and len(err.strip().splitlines()) == 1 and f"{run / 'model' / name} is damaged" in err, err
    assert not (tmp_path / "predictions.tsv").exists()


def test_an_edited_task_json_is_refused_as_damaged(run):
    path = run / "model" / "task.json"
    path.write_text(path.read_text().replace('"yes"', '"yeah"'))  # a class renamed: every prediction mislabelled
    with pytest.raises(CheckpointError, match=f"{path} is damaged"):
        load_task_model(run)


@pytest.mark.parametrize("change, expected", [
    (lambda v: v.update(task=["classification"]), r"task=\['classification'\] \(allowed: classification \| "),
    (lambda v: v.update(max_length="64"), r"max_length='64' \(allowed: an integer >= 2\)"),
    (lambda v: v.update(classes=None), r"classes=None \(allowed: a list of two or more distinct class names"),
    (lambda v: v.update(pool={"mean": 1}), r"pool=\{'mean': 1\} \(allowed: mean \| cls \| max\)"),
    (lambda v: v.update(extra=1), r"unknown key 'extra' \(allowed: task, classes, pool, "),
    (lambda v: v.update(classes=["a", "b", "c"]), r"the head has shapes .* but task.json describes 3 classes"),
    (lambda v: v.update(files={HEAD_FILE: "0"}), r"files=\{'task_head.safetensors': '0'\} \(allowed: "),
])
def test_a_crafted_task_json_is_one_line_naming_it(change, expected, run, pretrained, tmp_path, capsys):
    path = write_task_json(run, change)
    with pytest.raises(CheckpointError, match=expected):
        load_task_model(run)
    status, err = predict(run, pretrained, tmp_path, capsys)
    assert status == 2 and len(err.strip().splitlines()) == 1 and str(path.parent) in err, err


@pytest.mark.parametrize("text, expected", [("[" * 200_000, "is not valid JSON"), ("[1, 2]", "holds a JSON list"),
                                            ("\x00" * 100, "is not valid JSON")])
def test_a_task_json_that_is_not_an_object_of_fields_is_one_line(text, expected, run, pretrained, tmp_path, capsys):
    (run / "model" / "task.json").write_text(text)
    status, err = predict(run, pretrained, tmp_path, capsys)
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{run / 'model' / 'task.json'} {expected}" in err and "Traceback" not in err, err


def test_a_missing_head_is_one_line_naming_it(run, pretrained, tmp_path, capsys):
    (run / "model" / HEAD_FILE).unlink()
    status, err = predict(run, pretrained, tmp_path, capsys)
    assert status == 2 and err.strip() == (f"biotf predict: error: fine-tuned model directory {run / 'model'} has no "
                                           f"{HEAD_FILE} (listed in task.json)"), err


def test_an_export_written_before_the_crcs_still_loads_with_a_warning(run):
    """Exports written before task.json carried CRC-32s load (re-exporting needs the run's checkpoints, which a
    copied model/ may lack), saying that their head is unchecked."""
    path = run / "model" / "task.json"
    values = json.loads(path.read_text())
    path.write_text(json.dumps({k: v for k, v in values.items() if k not in ("files", DIGEST_KEY)}))
    with pytest.warns(UserWarning, match="records no CRC-32s .* loaded unchecked"):
        model, _, info = load_task_model(run)
    assert info.classes == ["no", "yes"] and model.head.out_features == 2
