"""Genome annotation experiment: windows of contexts, settings, training windows, the model's per-base
probabilities at any context, and a tiny run end to end (slow)."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch

from biotf.cli import main
from biotf_recipes.experiments.annotation_labels import CDS_MINUS, CDS_PLUS, OTHER, AnnotatedGenome, read_annotated
from biotf.errors import ConfigError
from biotf_recipes.experiments import run_experiment
from biotf_recipes.experiments import genome_annotation as annotation


@pytest.mark.parametrize("size, circular, start, length, context", [
    (100, True, 90, 30, 8), (100, True, 0, 100, 16), (100, True, 10, 20, 500), (100, False, 0, 100, 30),
    (100, False, 95, 5, 40), (100, False, 0, 7, 40), (50, True, 40, 20, 50),
])
def test_context_windows_cover_the_region_once_each_piece_inside_its_window(size, circular, start, length, context):
    windows = annotation.context_windows(size, circular, start, length, context)
    scored = []
    for first, window, offset, piece in windows:
        assert window == min(context, size) and 0 <= offset and offset + piece <= window
        if not circular:
            assert 0 <= first and first + window <= size
        scored += [(first + offset + i) % size for i in range(piece)]
    assert scored == [(start + i) % size for i in range(length)]
    # a piece gets flanks on both sides where the genome has room (centred within one base)
    first, window, offset, piece = windows[0]
    if circular and window > piece:
        assert abs(offset - (window - piece - offset)) <= 1


def test_settings_parse_and_refuse():
    settings = annotation.parse_settings({"eval_contexts": "1024, 4096", "train_context": "512",
                                          "positions": "alibi,rope"})
    assert (settings.eval_contexts, settings.train_context, settings.positions) == ((1024, 4096), 512,
                                                                                    ("alibi", "rope"))
    with pytest.raises(ConfigError, match="invalid settings=.*'context'.*allowed: train_genome"):
        annotation.parse_settings({"context": "5"})
    with pytest.raises(ConfigError, match="invalid settings.train_context.*'4k'.*one int value|int values"):
        annotation.parse_settings({"train_context": "4k"})
    with pytest.raises(ConfigError, match="invalid settings.positions.*'relative'.*alibi"):
        annotation.parse_settings({"positions": "relative"})
    with pytest.raises(ConfigError, match="experiment extrapolation takes none.*genome-annotation"):
        run_experiment("extrapolation", "unused", (0,), settings={"train_context": "5"})


def test_a_rerun_with_another_held_out_region_is_refused(tmp_path):
    settings = annotation.Settings()
    annotation.check_same_data(tmp_path, settings)
    annotation.check_same_data(tmp_path, annotation.parse_settings({"eval_contexts": "512"}, settings))  # may change
    with pytest.raises(ConfigError, match="invalid settings.held_out_start.*holds an experiment made with 30000"):
        annotation.check_same_data(tmp_path, annotation.parse_settings({"held_out_start": "0"}, settings))


def test_set_without_equals_is_one_line(capsys):
    assert main(["experiment", "genome-annotation", "--set", "train_context"]) == 2
    assert "--set" in capsys.readouterr().err


def test_training_windows_carry_their_reverse_complement(tmp_path):
    genome = AnnotatedGenome("g", "AACCGGTTA", np.array([CDS_PLUS] * 4 + [OTHER] * 3 + [CDS_MINUS] * 2, np.int8),
                             [], False)
    with open(annotation.write_windows(genome, 4, tmp_path / "w.csv"), encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["id"], r["sequence"], r["label"], r["window"]) for r in rows] == [
        ("g:0", "AACC", "0000", "g:0"), ("g:0:rc", "GGTT", "1111", "g:0"),
        ("g:4", "GGTT", "3331", "g:4"), ("g:4:rc", "AACC", "0333", "g:4"),
        ("g:8", "A", "1", "g:8"), ("g:8:rc", "T", "0", "g:8")]


def tiny_token_model(classes: int):
    from biotf.model import Transformer, TransformerConfig
    from biotf.model.heads import TaskModel
    from biotf.tokenizers.build import build_tokenizer

    tokenizer = build_tokenizer({"kind": "dna", "k": 1, "stride": 1})
    torch.manual_seed(0)
    trunk = Transformer(TransformerConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2,
                                          n_kv_heads=2, d_ff=32, pos="alibi", causal=False, max_seq_len=64))
    return TaskModel(trunk, "token", classes).eval(), tokenizer


def test_model_probabilities_per_base_from_their_windows(shared_data):
    from biotf.data.collators import content_mask

    model, tokenizer = tiny_token_model(2)
    (phix,) = read_annotated(shared_data / "dna/biopython_NC_001422_phiX174.gbk")
    evaluation = annotation.Evaluation("phix", phix, 5300, 200)  # across the origin
    device = torch.device("cpu")
    probabilities = annotation.model_probabilities(model, tokenizer, ["0", "3"], evaluation, 64, device)
    assert probabilities.shape == (200, 4) and np.allclose(probabilities.sum(1), 1, atol=1e-6)
    assert (probabilities[:, [1, 2]] == 0).all()  # classes the model has no output for
    # the first piece: bases 5300..5363, read in the window of 64 bases that is exactly that piece
    ids = torch.tensor(tokenizer.encode(phix.piece(5300, 64).sequence))[None]
    with torch.no_grad():
        logits = model(ids, torch.ones_like(ids), content_mask(ids, torch.ones_like(ids), tokenizer)).logits[0, 1:-1]
    np.testing.assert_allclose(probabilities[:64][:, [0, 3]], logits.softmax(-1).numpy(), atol=1e-6)


@pytest.mark.slow
def test_tiny_experiment_end_to_end(tmp_path, capsys):
    """Every model trains a few steps, is scored at its context and beyond, anchors included; a rerun reuses."""
    out = tmp_path / "annotation"
    args = ["experiment", "genome-annotation", "--out", str(out), "--seeds", "0", "--set", "train_context=256",
            "--set", "short_context=128", "--set", "eval_contexts=256,512", "--set", "positions=alibi,learned",
            "--set", "held_out_length=3000", "--set", "kmer_window=32",
            "--set", f"test_genomes={annotation.SAMPLES_DIR / 'biopython_NC_001422_phiX174.gbk'}",
            "trainer.max_steps=3", "trainer.val_check_interval=3", "model.n_layers=1", "model.d_model=32"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    with open(out / annotation.TABLE_FILE, encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    assert list(rows[0]) == annotation.HEADER and "\n| method | trained at |" in printed
    by_key = {(r["method"], r["trained at"], r["context"], r["genome"]): r for r in rows}
    held_out = "NC_000932.1 held-out"
    assert by_key[("biotf pos=learned", "256", "512", held_out)]["F1 cds_plus"] == "cannot extend"
    assert float(by_key[("biotf pos=alibi", "256", "512", held_out)]["F1 other"]) >= 0
    assert float(by_key[("biotf pos=alibi", "128", "128", "NC_001422.1")]["gene recall"]) >= 0
    assert by_key[("Prodigal meta", "-", "-", "NC_001422.1")]["F1 rna"] == "n/a"
    assert {r["method"] for r in rows} >= {"biotf pos=alibi", "biotf pos=learned", "Prodigal meta",
                                           "Prodigal single (trained on the training region)",
                                           "k-mer logistic (k=1..3, 32-base window)"}
    assert "## Train short, test long: macro F1 on NC_001422.1" in (out / "report.md").read_text()
    finished = out / "runs" / "alibi_ctx256" / "seed0" / "finetune.json"
    before = finished.stat().st_mtime
    assert main(args) == 0  # reuses the finished runs and their scores; only the anchors' times change
    with open(out / annotation.TABLE_FILE, encoding="utf-8") as handle:
        again = list(csv.DictReader(handle, delimiter="\t"))
    assert finished.stat().st_mtime == before
    assert [{k: v for k, v in r.items() if k != "eval s"} for r in again] == \
        [{k: v for k, v in r.items() if k != "eval s"} for r in rows]


def test_the_short_context_model_sees_as_many_bases_per_step(tmp_path, monkeypatch):
    """Only the context differs between the short-context anchor and the models it is compared with."""
    trained = {}
    def init_model(overrides, directory, seed):
        directory.mkdir(parents=True)
        return annotation.compose_config([*overrides, "task=null", "init_from=null"]).model

    monkeypatch.setattr(annotation, "init_model", init_model)
    monkeypatch.setattr(annotation, "train_job", lambda config, directory: trained.setdefault(
        directory.parent.name, config.data.batch_size))
    base = ["experiment=genome_annotation", "data.batch_size=3"]
    windows = tmp_path / "train.csv"
    windows.write_text("id,sequence,label,window\nw0,ACGT,0123,0\n")
    for context in (4096, 1024, 512):
        annotation.train_model(tmp_path, base, windows, "alibi", context, 0, train_context=4096)
    assert trained == {"alibi_ctx4096": 3, "alibi_ctx1024": 12, "alibi_ctx512": 24}
