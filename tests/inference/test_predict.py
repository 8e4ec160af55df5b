"""`predict_file`, the library call behind `biotf predict`: one row per record in input order, the prediction in the
training labels' text form, probabilities for classifiers, and records the long-sequence policy dropped counted."""

from __future__ import annotations

import csv
from collections import Counter

import numpy as np
import pytest
import torch

from biotf.checkpoint.task_model import TaskInfo, save_task_model
from biotf.data.collators import content_mask, pad_batch
from biotf.data.long_policy import CROPPED, DROPPED, encode_for_task
from biotf.inference.predict import predict, predict_file
from biotf.model import Transformer, TransformerConfig
from biotf.model.heads import TaskModel
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


def test_max_length_reads_whole_records_past_the_trained_length(tmp_path, fasta, capsys):
    """Trained on 16 tokens (max_seq_len 64, RoPE): --max-length 100 labels every residue of p3 (22) in one pass, as
    the model does over the whole record, with one warning line naming the 64; a learned table would refuse."""
    from biotf.cli import main

    directory, model, tokenizer = export(tmp_path, "token", ["H", "E", "C"], long_policy="drop")
    assert main(["predict", "--model", str(directory), "--input", str(fasta), "--output", str(tmp_path / "all.tsv"),
                 "--max-length", "100", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if "warning" in line] == [
        "biotf predict: warning: max_length=100 reads past the 64 tokens this model was trained with (its "
        "max_seq_len); pos=rope extends, but accuracy that far is the model's own (ALiBi holds it best)"]
    rows = read(tmp_path / "all.tsv")
    assert [row[0] for row in rows[1:]] == list(RECORDS)
    ids, attention = (torch.from_numpy(a) for a in pad_batch([tokenizer.encode(RECORDS["p3"])], tokenizer.pad_id))
    with torch.no_grad():
        expected = model(ids, attention, content_mask(ids, attention, tokenizer)).predictions[0, 1:-1]
    assert rows[3][1] == "".join("HEC"[int(c)] for c in expected)


def test_regression_values_are_in_the_labels_unit(tmp_path, fasta):
    directory, model, tokenizer = export(tmp_path, "regression", None)
    predict_file(directory, fasta, tmp_path / "out.tsv")
    rows = read(tmp_path / "out.tsv")
    assert rows[0] == ["id", "prediction"]
    values, _ = predict(model, tokenizer, [encode_for_task(tokenizer, RECORDS["p2"], "p2", 16, "crop", Counter())])
    assert float(rows[2][1]) == pytest.approx(float(values[0][0]), rel=1e-5)


# --- packing: records of a batch share rows, each alone in its segment and pooled alone ---------------------------
def mixed_records(n: int = 11) -> list:
    tokenizer = AminoAcidTokenizer()
    generator = torch.Generator().manual_seed(2)
    lengths = [1, 7, 3, 40, 12, 2, 25, 5, 60, 9, 4][:n]
    return [tokenizer.encode("".join("ACDEFGHIKLMNPQRSTVWY"[int(i)] for i in torch.randint(0, 20, (length,),
                                                                                            generator=generator)))
            for length in lengths]


@pytest.mark.parametrize("task,pool", [("classification", "mean"), ("classification", "max"),
                                       ("classification", "cls"), ("regression", "mean"), ("token", "mean")])
def test_packed_predictions_equal_unpacked_per_record(task, pool, monkeypatch):
    torch.manual_seed(0)
    tokenizer = AminoAcidTokenizer()
    trunk = Transformer(TransformerConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=2, n_heads=2,
                                          d_ff=32, max_seq_len=64, causal=False, pos="rope", init_std=0.3))
    model = TaskModel(trunk, task, 1 if task == "regression" else 3, pool=pool).eval()
    batch = mixed_records()
    packed_rows, encode = [], trunk.encode

    def recording(*args, **kwargs):
        packed_rows.append(kwargs["segment_ids"])
        return encode(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(trunk, "encode", recording)
        packed = predict(model, tokenizer, batch, packing=True)
    assert int(packed_rows[0].max()) > 1 and packed_rows[0].shape[0] < len(batch)  # several records in a row
    plain = predict(model, tokenizer, batch)
    for one, other in zip(packed, plain):
        assert one.shape == other.shape
    for number, ids in enumerate(batch):
        alone = predict(model, tokenizer, [ids])
        def own(values: np.ndarray, index: int) -> np.ndarray:  # per residue: the record's own positions
            return values[index][:len(ids)] if task == "token" else values[index]

        np.testing.assert_allclose(own(packed[1], number), own(alone[1], 0), rtol=0, atol=1e-5)
        np.testing.assert_allclose(own(plain[1], number), own(alone[1], 0), rtol=0, atol=1e-5)
        if task != "regression":
            assert np.array_equal(own(packed[0], number), own(alone[0], 0))


def test_pooled_heads_pool_each_packed_record_alone():
    """`TaskModel(segment_ids=...)`: one pooled vector per record in row then run order, each as the record alone
    (a mean over the whole packed row would mix the records)."""
    torch.manual_seed(0)
    tokenizer = AminoAcidTokenizer()
    trunk = Transformer(TransformerConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2,
                                          d_ff=32, max_seq_len=64, causal=False, pos="rope", init_std=0.3))
    model = TaskModel(trunk, "classification", 2, pool="mean").eval()
    first, second, third = mixed_records(3)
    width = len(first) + len(second) + 1
    ids = torch.tensor([[*first, *second, tokenizer.pad_id], [*third] + [tokenizer.pad_id] * (width - len(third))])
    segments = torch.tensor([[1] * len(first) + [2] * len(second) + [0], [1] * len(third) + [0] * (width - len(third))])
    with torch.no_grad():
        logits = model(ids, None, content_mask(ids, segments != 0, tokenizer), segment_ids=segments).logits
        for number, record in enumerate((first, second, third)):
            one = torch.tensor([record])
            alone = model(one, None, content_mask(one, torch.ones_like(one), tokenizer)).logits[0]
            torch.testing.assert_close(logits[number], alone, rtol=0, atol=1e-5)
    assert logits.shape == (3, 2)


def test_predict_file_with_packing_writes_the_unpacked_rows(tmp_path, fasta):
    directory, _, _ = export(tmp_path, "classification", ["no", "yes"])
    predict_file(directory, fasta, tmp_path / "plain.tsv", batch_size=3)
    summary = predict_file(directory, fasta, tmp_path / "packed.tsv", batch_size=3, packing=True)
    plain, packed = read(tmp_path / "plain.tsv"), read(tmp_path / "packed.tsv")
    assert [row[:2] for row in packed] == [row[:2] for row in plain] and summary.rows == 3
    for one, other in zip(packed[1:], plain[1:]):
        assert [float(p) for p in one[2:]] == pytest.approx([float(p) for p in other[2:]], abs=2e-6)


def test_predict_command_packing_and_a_stem_model_refusing_it(tmp_path, fasta, capsys):
    from biotf.cli import main

    directory, _, _ = export(tmp_path, "token", ["H", "E", "C"])
    outputs = {}
    for name, extra in (("plain", []), ("packed", ["--packing"])):
        status = main(["predict", "--model", str(directory), "--input", str(fasta), "--output",
                       str(tmp_path / f"{name}.tsv"), *extra])
        out = capsys.readouterr().out
        assert status == 0 and ("packed rows" in out) is bool(extra), out
        outputs[name] = read(tmp_path / f"{name}.tsv")
    assert outputs["packed"] == outputs["plain"]  # ids, order and one label per residue
    torch.manual_seed(0)
    tokenizer = AminoAcidTokenizer()
    trunk = Transformer(TransformerConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2,
                                          d_ff=32, max_seq_len=64, causal=False, stem="conv", stem_widths=[8, 16],
                                          stem_kernel=3, stem_pool=[2, 2]))
    stem = save_task_model(TaskModel(trunk, "classification", 2), tokenizer,
                           TaskInfo("classification", ["no", "yes"], "mean", 16, "crop"), tmp_path / "stem")
    status = main(["predict", "--model", str(stem), "--input", str(fasta), "--output", str(tmp_path / "s.tsv"),
                   "--packing"])
    err = capsys.readouterr().err
    assert status == 2 and len(err.strip().splitlines()) == 1 and "packing=True" in err and "stem" in err, err
    assert not (tmp_path / "s.tsv").exists()
