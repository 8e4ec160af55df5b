"""`predict_file`, the library call behind `biotf predict`: one row per record in input order, the prediction in the
training labels' text form, probabilities for classifiers, and records the long-sequence policy dropped counted."""

from __future__ import annotations

import csv
from collections import Counter

import pytest
import torch

from biotf.checkpoint.task_model import TaskInfo, save_task_model
from biotf.data.collators import content_mask, pad_batch
from biotf.data.long_policy import CROPPED, DROPPED, encode_for_task
from biotf.inference.predict import predict, predict_file
from biotf.model import Transformer, TransformerConfig
from biotf.model.tasks import TaskModel
from biotf.tokenizers import AminoAcidTokenizer

RECORDS = {"p1": "MKTAYIAKQR", "p2": "GAV", "p3": "MKTAYIAKQRQISFVKSHFSRQ"}


@pytest.fixture
def fasta(tmp_path):
    path = tmp_path / "proteins.fasta"
    path.write_text("".join(f">{name}\n{sequence}\n" for name, sequence in RECORDS.items()))
    return path


def export(tmp_path, task: str, classes: list[str] | None, long_policy: str = "crop"):
    torch.manual_seed(0)
    tokenizer = AminoAcidTokenizer()
    trunk = Transformer(TransformerConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2,
                                          d_ff=32, max_seq_len=64, causal=False))
    model = TaskModel(trunk, task, 1 if classes is None else len(classes), pool="mean")
    info = TaskInfo(task, classes, "mean", 16, long_policy)
    return save_task_model(model, tokenizer, info, tmp_path / f"model_{task}"), model.eval(), tokenizer


def read(path, delimiter="\t"):
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle, delimiter=delimiter))


def test_classification_rows_follow_the_input_and_carry_probabilities(tmp_path, fasta):
    directory, model, tokenizer = export(tmp_path, "classification", ["no", "yes"])
    summary = predict_file(directory, fasta, tmp_path / "out.csv", batch_size=2)
    rows = read(tmp_path / "out.csv", ",")
    assert rows[0] == ["id", "prediction", "p_no", "p_yes"]
    assert [row[0] for row in rows[1:]] == list(RECORDS)
    assert (summary.rows, summary.records, summary.task) == (3, 3, "classification")
    assert summary.counts == {CROPPED: 1}  # p3: 24 tokens > 16
    ids = [encode_for_task(tokenizer, s, n, 16, "crop", Counter()) for n, s in RECORDS.items()]
    predicted, scores = predict(model, tokenizer, ids)
    for row, label, probabilities in zip(rows[1:], predicted, scores):
        assert row[1] == ["no", "yes"][int(label)]
        assert [float(p) for p in row[2:]] == pytest.approx(probabilities.tolist(), abs=1e-6)


def test_token_predictions_have_one_label_per_residue_and_drop_counts(tmp_path, fasta):
    directory, model, tokenizer = export(tmp_path, "token", ["H", "E", "C"], long_policy="drop")
    summary = predict_file(directory, fasta, tmp_path / "out.tsv")
    rows = read(tmp_path / "out.tsv")
    assert rows[0] == ["id", "prediction"] and [row[0] for row in rows[1:]] == ["p1", "p2"]
    assert [len(row[1]) for row in rows[1:]] == [10, 3] and set("".join(r[1] for r in rows[1:])) <= set("HEC")
    assert summary.counts == {DROPPED: 1} and (summary.rows, summary.records) == (2, 3)
    ids, attention = (torch.from_numpy(a) for a in pad_batch([tokenizer.encode(RECORDS["p1"])], tokenizer.pad_id))
    with torch.no_grad():
        expected = model(ids, attention, content_mask(ids, attention, tokenizer)).predictions[0, 1:-1]
    assert rows[1][1] == "".join("HEC"[int(c)] for c in expected)


def test_regression_values_are_in_the_labels_unit(tmp_path, fasta):
    directory, model, tokenizer = export(tmp_path, "regression", None)
    predict_file(directory, fasta, tmp_path / "out.tsv")
    rows = read(tmp_path / "out.tsv")
    assert rows[0] == ["id", "prediction"]
    values, _ = predict(model, tokenizer, [encode_for_task(tokenizer, RECORDS["p2"], "p2", 16, "crop", Counter())])
    assert float(rows[2][1]) == pytest.approx(float(values[0][0]), rel=1e-5)
