"""Fine-tuning end to end on a tiny pretrained model: each mode trains, the split is recorded and keeps groups
apart, the best checkpoint is exported, `biotf predict` reproduces the run's test predictions, LoRA leaves the
base trunk unchanged and its adapter alone rebuilds the fine-tuned model."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from biotf.errors import BiotfError, CheckpointError, ConfigError, InputError
from training_helpers import finetune_config, finetune_overrides


def read_tsv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def test_train_py_fine_tunes_a_classifier_and_biotf_predict_reproduces_its_test_predictions(pretrained, tmp_path,
                                                                                              monkeypatch):
    # train.py's entry point in this process (the script under a fresh interpreter: tests/training/test_console.py)
    from biotf.entry import train as entry

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    assert entry.main(finetune_overrides(pretrained, "data.label_column=label", f"hydra.run.dir={run}")) == 0
    summary = json.loads((run / "finetune.json").read_text())
    assert summary["dropped"] == {"unlabelled": 1} and summary["cropped"] == 0
    assert summary["split"]["records"] == {"train": 191, "validation": 24, "test": 24}
    assert summary["test"]["accuracy"] >= 0.9 and summary["test"]["mcc"] >= 0.8, summary["test"]
    assert summary["classes"] == ["no", "yes"]
    split = read_tsv(run / "split.tsv")
    assert len(split) == 239 and {r["split"] for r in split} == {"train", "validation", "test"}
    test_ids = {r["id"] for r in split if r["split"] == "test"}
    expected = {r["id"]: r["prediction"] for r in read_tsv(run / "predictions_test.tsv")}
    assert set(expected) == test_ids

    # Every tool that takes a model takes the run: Model.load (and so biotf embed / score) gives the fine-tuned
    # trunk of its export; the checkpoint file alone, which holds no tokenizer, is refused naming the run.
    from biotf.api import Model
    from biotf.checkpoint.task_model import load_task_model

    trunk = Model.load(run).network
    tuned, _, _ = load_task_model(run)
    assert all(torch.equal(a, b) for a, b in zip(trunk.state_dict().values(), tuned.trunk.state_dict().values()))
    with pytest.raises(CheckpointError, match="fine-tuning run's model loads from its run directory"):
        Model.load(run / "checkpoints" / "best.ckpt")

    from biotf.cli import main

    output = tmp_path / "predictions.tsv"
    assert main(["predict", "--model", str(run), "--input", str(pretrained / "labelled.csv"), "--id-column", "id",
                 "--output", str(output)]) == 0
    predicted = {r["id"]: r for r in read_tsv(output)}
    assert len(predicted) == 240  # predict needs no label: p4 too
    assert all(predicted[i]["prediction"] == expected[i] for i in test_ids)
    assert all(abs(float(r["p_no"]) + float(r["p_yes"]) - 1) < 1e-5 for r in predicted.values())

    # A predict killed while it writes leaves no partial file under the output's name (nor a temporary).
    writer = csv.writer

    def dies_half_way(handle, **kwargs):
        inner = writer(handle, **kwargs)

        def writerows(rows):
            rows = list(rows)
            inner.writerows(rows[:len(rows) // 2])
            raise OSError("killed mid-write")
        return SimpleNamespace(writerow=inner.writerow, writerows=writerows)

    monkeypatch.setattr(csv, "writer", dies_half_way)
    with pytest.raises(OSError, match="killed mid-write"):
        main(["predict", "--model", str(run), "--input", str(pretrained / "labelled.csv"), "--id-column", "id",
              "--output", str(tmp_path / "killed" / "predictions.tsv")])
    assert list((tmp_path / "killed").iterdir()) == []


def test_lora_regression_leaves_the_base_trunk_and_its_adapter_rebuilds_the_model(pretrained, tmp_path):
    from biotf.api import Model
    from biotf.checkpoint.task_model import load_task_model
    from biotf.model.lora import load_adapter
    from biotf.finetune.finetune_run import train_task

    cfg = finetune_config(pretrained, "data.label_column=value", "task=regression", "finetune.mode=lora",
                 "finetune.lora.targets=[qkv,out,gate_up,down]", "finetune.monitor=spearman",
                 "trainer.gradient_checkpointing=true", "finetune.split.method=identity")
    summary = train_task(cfg, tmp_path)
    assert summary.test["spearman"] > 0.6, summary.test
    # rank 8 x (in + out) of qkv (32 -> 64), out (32 -> 32), gate_up (32 -> 128), down (64 -> 32), 2 blocks; head 33
    assert summary.trainable_parameters == 2 * 8 * (96 + 64 + 160 + 96) + 33
    base = load_file(str(pretrained / "base" / "model.safetensors"))
    merged = load_file(str(tmp_path / "model" / "model.safetensors"))
    assert set(merged) == set(base) and any(not torch.equal(merged[k], base[k]) for k in base)  # merged, changed
    assert not list(tmp_path.rglob(".*"))  # the adapter went into the export's staging: no temporary left
    trunk = Model.load(pretrained / "base").network
    load_adapter(trunk, tmp_path / "model" / "adapter.safetensors")
    model, tokenizer, info = load_task_model(tmp_path)
    ids = torch.tensor([tokenizer.encode("MKKWWLAAKR")])
    with torch.no_grad():
        torch.testing.assert_close(trunk.encode(ids).last_hidden_state, model.trunk.encode(ids).last_hidden_state,
                                   rtol=1e-5, atol=1e-5)
    assert info.task == "regression" and info.classes is None


def test_frozen_token_head_on_a_group_split_keeps_families_apart_and_the_trunk_unchanged(pretrained, tmp_path):
    from biotf.finetune.finetune_run import train_task

    cfg = finetune_config(pretrained, "data.label_column=ss", "task=token", "finetune.mode=frozen", "optim.lr=3e-2",
                 "finetune.split.method=group", "finetune.split.group_column=family", "finetune.monitor=accuracy")
    summary = train_task(cfg, tmp_path)
    assert summary.test["accuracy"] > 0.75, summary.test  # H/C is a function of the residue: linear in its vector
    families = {}
    with open(pretrained / "labelled.csv") as handle:
        family = {row["id"]: row["family"] for row in csv.DictReader(handle)}
    for row in read_tsv(tmp_path / "split.tsv"):
        families.setdefault(family[row["id"]], set()).add(row["split"])
    assert all(len(sides) == 1 for sides in families.values())
    base = load_file(str(pretrained / "base" / "model.safetensors"))
    tuned = load_file(str(tmp_path / "model" / "model.safetensors"))
    assert all(torch.equal(tuned[k], base[k]) for k in base)
    # The best checkpoint is written as a language-model run's: with a content CRC-32, which catches damage.
    from biotf.checkpoint import DIGEST_KEY, read_checkpoint
    from biotf.errors import CheckpointError

    best = Path(summary.best_checkpoint)
    assert DIGEST_KEY in torch.load(best, weights_only=True) and read_checkpoint(best)["state_dict"]
    damaged = bytearray(best.read_bytes())
    damaged[len(damaged) // 2:len(damaged) // 2 + 100] = bytes(100)
    best.write_bytes(bytes(damaged))
    with pytest.raises(CheckpointError):
        read_checkpoint(best)


def test_the_composed_model_group_does_not_limit_a_fine_tuning_run(pretrained):
    """experiment=finetune's max_length (1024) exceeds the default model group's 512: init_from's model counts."""
    assert finetune_config(pretrained, "data.label_column=label", "data.max_length=1024").data.max_length == 1024


@pytest.mark.parametrize("name, records, task, split", [("finetune_deeploc", 2768, "classification", "identity"),
                                                      ("finetune_splice", 3190, "classification", "identity"),
                                                      ("finetune_esol", 1128, "regression", "scaffold")])
def test_the_worked_examples_are_experiment_presets_on_shipped_data(name, records, task, split):
    """`experiment=finetune_<example>` is the README's example with only init_from to give; its labelled file ships
    (biotf/samples), and its label settings find a label in every record."""
    from hydra import compose, initialize_config_dir

    from biotf.conventions import CONF_DIR
    from biotf.training.train_config import register_configs, validate
    from biotf.finetune.labelled import _label_values

    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        config = validate(compose(config_name="config", overrides=[f"experiment={name}", f"init_from={CONF_DIR}"]))
    assert config.experiment == name and config.task == task and config.finetune.split.method == split
    assert config.finetune.split.identity in (0.6, 0.8) and config.trainer.max_steps == 600
    _, labels, _ = _label_values(config)
    assert len(labels) == records and all(labels), name


def test_bad_fine_tuning_configs_stop_before_training(pretrained, tmp_path):
    with pytest.raises(ConfigError, match="data.label_column"):
        finetune_config(pretrained, "data.label_column=null")
    with pytest.raises(ConfigError, match="finetune.monitor.*rmse"):
        finetune_config(pretrained, "data.label_column=value", "task=regression", "finetune.monitor=accuracy")
    with pytest.raises(ConfigError, match="finetune.split.group_column"):
        finetune_config(pretrained, "data.label_column=label", "finetune.split.method=group")
    with pytest.raises(ConfigError, match="init_from"):
        finetune_config(pretrained, "data.label_column=label", f"init_from={tmp_path / 'missing'}")
    from biotf.finetune.finetune_run import train_task

    with pytest.raises(InputError, match="column 'labels' not found"):
        train_task(finetune_config(pretrained, "data.label_column=labels"), tmp_path / "a")
    with pytest.raises(InputError, match="record 'p0': label 'no' is not a number"):
        train_task(finetune_config(pretrained, "data.label_column=label", "task=regression", "finetune.monitor=rmse"),
                   tmp_path / "b")
    with pytest.raises(BiotfError, match="not a fine-tuned model"):
        from biotf.checkpoint.task_model import load_task_model

        load_task_model(pretrained / "base")


def test_gradient_checkpointing_switch_reaches_language_model_runs(tmp_path, cache_dir, monkeypatch):
    """trainer.gradient_checkpointing recomputes every block in backward in a masked-LM run too."""
    from biotf.model.block import Block
    from biotf.entry import train as entry
    from training_helpers import TINY

    monkeypatch.chdir(tmp_path)
    forward, calls = Block.forward, []

    def counted(self, *args, **kwargs):
        calls.append(self.training)
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(Block, "forward", counted)
    training_calls = {}
    for switch in ("false", "true"):
        calls.clear()
        assert entry.main(["experiment=protein_mlm", *TINY, "trainer.max_steps=2", "trainer.val_check_interval=5",
                           f"trainer.gradient_checkpointing={switch}", f"data.cache_dir={cache_dir}",
                           f"hydra.run.dir={tmp_path / switch}"]) == 0
        training_calls[switch] = sum(calls)
    assert training_calls == {"false": 2 * 2, "true": 2 * 2 * 2}  # 2 steps x 2 blocks, each run again in backward


def with_records(pretrained: Path, path: Path, edit) -> str:
    """`data.path=` a copy of the fixture's labelled.csv whose lines (header first) `edit` changed in place."""
    lines = (pretrained / "labelled.csv").read_text().splitlines()
    edit(lines)
    path.write_text("\n".join(lines) + "\n")
    return f"data.path={path}"


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e999"])
def test_a_non_finite_regression_label_is_refused_naming_file_record_and_value(value, pretrained, tmp_path):
    """One such label in train made every prediction NaN, exported with exit 0."""
    from biotf.finetune.finetune_run import train_task

    def edit(lines):
        fields = lines[8].split(",")  # record p7
        lines[8] = ",".join([*fields[:3], value, *fields[4:]])

    data = with_records(pretrained, tmp_path / "labelled.csv", edit)
    cfg = finetune_config(pretrained, "data.label_column=value", "task=regression", "finetune.monitor=rmse", data)
    with pytest.raises(InputError, match=rf"^{tmp_path / 'labelled.csv'}: record 'p7': label '{value}' is not a "
                                         r"finite number \(task=regression\)"):
        train_task(cfg, tmp_path / "run")
    assert not (tmp_path / "run" / "split.tsv").exists()


def test_a_non_finite_loss_stops_the_run_in_one_line_and_exports_nothing(pretrained, tmp_path, capsys, monkeypatch):
    """Training loss: learning rates that overflow the weights; validation loss: a NaN from the model's outputs."""
    from biotf.entry import train as entry
    from biotf.finetune.task_module import NonFiniteLoss, TaskModule

    monkeypatch.chdir(tmp_path)
    run = tmp_path / "diverged"
    assert entry.main(finetune_overrides(pretrained, "data.label_column=label", "optim.lr=1e30",
                                         "finetune.trunk_lr=1e30", f"hydra.run.dir={run}")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("train: error: non-finite training loss nan at step ") and "Traceback" not in err
    assert "nothing exported" in err[-1]
    collected = TaskModule.collected_metrics
    monkeypatch.setattr(TaskModule, "collected_metrics", lambda self: {**collected(self), "loss": float("nan")})
    from biotf.finetune.finetune_run import train_task

    with pytest.raises(NonFiniteLoss, match="non-finite validation loss nan at step 10"):
        train_task(finetune_config(pretrained, "data.label_column=label"), tmp_path / "nan")
    for directory in (run, tmp_path / "nan"):
        assert not {"model", "predictions_test.tsv", "finetune.json"} & {p.name for p in directory.iterdir()}
    with pytest.raises(ConfigError, match="trainer.nonfinite='skip': a fine-tuning run stops on a non-finite loss"):
        finetune_config(pretrained, "data.label_column=label", "trainer.nonfinite=skip")


def test_two_different_records_with_one_id_are_refused_naming_both(pretrained, tmp_path):
    """split.tsv and predictions name records by id; a record repeated whole (UCI splice) is kept, see
    test_the_worked_examples_are_experiment_presets_on_shipped_data."""
    from biotf.finetune.finetune_run import train_task

    data = with_records(pretrained, tmp_path / "labelled.csv", lambda lines: lines.append(
        lines[4].replace(lines[4].split(",")[1], "MKKLLW")))  # a second p3, with another sequence
    with pytest.raises(InputError, match=r"labelled.csv: records 4 and 241 have the same id 'p3' but differ"):
        train_task(finetune_config(pretrained, "data.label_column=label", data), tmp_path / "run")


@pytest.fixture
def causal(pretrained, tmp_path) -> Path:
    """A tiny causal model with the protein tokenizer."""
    from biotf.checkpoint import save_pretrained
    from biotf.model import Transformer, TransformerConfig
    from biotf.tokenizers import build_tokenizer

    tokenizer = build_tokenizer({"kind": "protein"})
    model = Transformer(TransformerConfig.preset("tiny", causal=True, vocab_size=tokenizer.vocab_size))
    return save_pretrained(model, tokenizer, tmp_path / "causal")


def smiles_model(tmp_path: Path) -> Path:
    from biotf.checkpoint import save_pretrained
    from biotf.model import Transformer, TransformerConfig
    from biotf.tokenizers import build_tokenizer

    tokenizer = build_tokenizer({"kind": "smiles"})
    model = Transformer(TransformerConfig.preset("tiny", causal=False, vocab_size=tokenizer.vocab_size))
    return save_pretrained(model, tokenizer, tmp_path / "smiles")


def test_settings_the_model_cannot_use_are_refused_before_any_data_is_read(pretrained, causal, tmp_path):
    from biotf.finetune.finetune_run import train_task

    cases = [
        # a causal model's first token sees nothing: every record would get the same prediction
        ([f"init_from={causal}", "finetune.pool=cls"],
         "invalid config finetune.pool='cls': the model is causal: its first token sees no later token, so every "
         "record would get the same vector (allowed: mean | max)"),
        # the narrowest adapted layers of the tiny model (qkv 32 -> 64, out 32 -> 32) have rank 32 at most
        (["finetune.mode=lora", "finetune.lora.rank=33"],
         "invalid config finetune.lora.rank=33: the narrowest adapted layer (qkv, 32 -> 64) has rank 32 at most "
         "(allowed: an integer from 1 to 32)"),
        # sequence identity of SMILES strings says nothing about molecules
        ([f"init_from={smiles_model(tmp_path)}", "finetune.split.method=identity"],
         "invalid config finetune.split.method='identity': sequence identity is for proteins and DNA"),
        (["data.max_length=1024"], f"data.max_length=1024 exceeds the max_seq_len 128 of {pretrained / 'base'}"),
        # a token head's bin resolution needs bins: a model with a conv stem
        (["task=token", "finetune.resolution=bin"],
         "invalid config finetune.resolution='bin': the model has no stem (model.stem: none), so its tokens are its "
         "bins (allowed: base)"),
        ([f"init_from={stem_model(tmp_path)}", "finetune.resolution=bin"],
         "invalid config finetune.resolution='bin': task=classification predicts one value per record"),
    ]
    for position, (overrides, expected) in enumerate(cases):
        run = tmp_path / f"run{position}"
        with pytest.raises((ConfigError, InputError)) as refused:
            train_task(finetune_config(pretrained, "data.label_column=label", *overrides), run)
        assert str(refused.value).startswith(expected), refused.value
        assert list(run.iterdir()) == []  # refused before split.tsv, config.yaml or anything else
    # cls stays allowed on a bidirectional model, and on a causal one for token heads (they pool nothing)
    assert train_task(finetune_config(pretrained, "data.label_column=label", "finetune.pool=cls",
                                      "trainer.max_steps=1"), tmp_path / "cls").steps == 1
    assert train_task(finetune_config(pretrained, "data.label_column=ss", "task=token", f"init_from={causal}",
                                      "finetune.pool=cls", "finetune.monitor=accuracy", "trainer.max_steps=1"),
                      tmp_path / "token").steps == 1


def test_max_length_defaults_to_the_models_and_the_summary_says_where_the_run_is(pretrained, tmp_path, monkeypatch,
                                                                                 capsys):
    """data.max_length was 1024 in experiment=finetune, which every model of max_seq_len < 1024 refused."""
    from biotf.finetune.finetune_run import train_task

    monkeypatch.chdir(pretrained)
    summary = train_task(finetune_config(pretrained, "data.label_column=label", "data.max_length=null",
                                         "init_from=base", "trainer.max_steps=4", "trainer.val_check_interval=2"),
                         tmp_path)
    assert summary.max_length == 128 and json.loads((tmp_path / "model" / "task.json").read_text())["max_length"] == 128
    written = json.loads((tmp_path / "finetune.json").read_text())
    assert written["init_from"] == "base" and written["init_from_resolved"] == str(pretrained / "base")
    assert written["run_dir"] == str(tmp_path) and written["best_step"] in (2, 4)
    out = capsys.readouterr().out
    assert f"  run directory: {tmp_path}\n" in out
    assert f"  best checkpoint: step {written['best_step']} ({tmp_path / 'checkpoints' / 'best.ckpt'})\n" in out


def stem_model(tmp_path: Path) -> Path:
    """The tiny bidirectional model with a conv stem of 4 tokens per bin, and the protein tokenizer."""
    from biotf.checkpoint import save_pretrained
    from biotf.model import Transformer, TransformerConfig
    from biotf.tokenizers import build_tokenizer

    tokenizer = build_tokenizer({"kind": "protein"})
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.preset("tiny", causal=False, vocab_size=tokenizer.vocab_size, stem="conv",
                                                 stem_widths=[16, 32], stem_kernel=5, stem_pool=[2, 2]))
    return save_pretrained(model, tokenizer, tmp_path / "stem")


def majority_counts(labels: list[str], factor: int) -> dict[str, int]:
    """The bin-label counts, by hand: tokens are <cls> + one per residue + <eos>, bins of `factor` tokens from <cls>;
    a bin's label is the most frequent of its residues' (a tie to the first class)."""
    from collections import Counter

    counts = {"bins": 0, "labelled_bins": 0, "labelled_tokens": 0, "outvoted_tokens": 0}
    for label in labels:
        tokens = [None, *label, None]
        for start in range(0, len(tokens), factor):
            votes = Counter(c for c in tokens[start:start + factor] if c is not None)
            counts["bins"] += 1
            counts["labelled_tokens"] += sum(votes.values())
            if votes:
                best = max(votes.values())
                counts["labelled_bins"] += 1
                counts["outvoted_tokens"] += sum(votes.values()) - best
    return counts


@pytest.mark.parametrize("resolution, mode", [("base", "full"), ("bin", "full"), ("bin", "frozen")])
def test_a_stem_model_fine_tunes_a_token_head_at_either_resolution(pretrained, tmp_path, resolution, mode):
    from biotf.checkpoint.task_model import load_task_model
    from biotf.io.readers import ReaderOptions
    from biotf.finetune.finetune_run import train_task
    from biotf.inference.predict import predict_file

    run = tmp_path / "run"
    summary = train_task(finetune_config(pretrained, "data.label_column=ss", "task=token",
                                         f"init_from={stem_model(tmp_path)}", f"finetune.resolution={resolution}",
                                         f"finetune.mode={mode}", "finetune.monitor=accuracy", "trainer.max_steps=6",
                                         "trainer.val_check_interval=3"), run)
    assert (summary.resolution, summary.steps) == (resolution, 6)
    with open(pretrained / "labelled.csv") as handle:
        labels = {row["id"]: row["ss"] for row in csv.DictReader(handle)}
    if resolution == "bin":
        assert summary.bin_labels == majority_counts(list(labels.values()), 4)
        assert "bin labels (majority of each bin's tokens)" in summary.text()
    else:
        assert summary.bin_labels is None
    expected = {row["id"]: row["prediction"] for row in read_tsv(run / "predictions_test.tsv")}
    for record, prediction in expected.items():
        assert len(prediction) == len(labels[record])  # per residue at either resolution
        if resolution == "bin":  # residue p is token p + 1, in bin (p + 1) // 4: one prediction per bin
            bins = {}
            assert all(bins.setdefault((p + 1) // 4, c) == c for p, c in enumerate(prediction))
    _, _, info = load_task_model(run)
    assert info.resolution == resolution
    predict_file(run, pretrained / "labelled.csv", tmp_path / "predicted.tsv", ReaderOptions(id_column="id"))
    predicted = {row["id"]: row["prediction"] for row in read_tsv(tmp_path / "predicted.tsv")}
    assert all(predicted[record] == prediction for record, prediction in expected.items())
