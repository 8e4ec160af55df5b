"""`biotf.Model`: each job from Python returns what its command writes (exactly: the same code runs), loads every
kind of source, and refuses a job the model cannot do in one line."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch

import biotf
from biotf.checkpoint.task_model import TaskInfo, save_task_model
from biotf.cli import main
from biotf.errors import BiotfWarning, CheckpointError, ConfigError
from biotf.model import Transformer, TransformerConfig
from biotf.model.heads import TaskModel
from biotf.tokenizers import AminoAcidTokenizer
from tiny_models import save_tiny_protein_model

PROTEINS = {"p1": "MKTAYIAKQR", "p2": "GAVLIM", "p3": "MKTAYIAKQRQISFVKSHFSRQ"}


@pytest.fixture(scope="module")
def protein_model(tmp_path_factory):
    return save_tiny_protein_model(tmp_path_factory.mktemp("api") / "model", max_seq_len=32)


@pytest.fixture
def fasta(tmp_path):
    path = tmp_path / "proteins.fasta"
    path.write_text("".join(f">{name}\n{sequence}\n" for name, sequence in PROTEINS.items()))
    return path


def read_table(path, delimiter=","):
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter=delimiter))


def test_embed_equals_the_embed_command(protein_model, fasta, tmp_path, capsys):
    model = biotf.Model.load(protein_model)
    assert (model.kind, model.source) == ("exported directory", str(protein_model))
    assert main(["embed", "--model", str(protein_model), "--input", str(fasta), "--output", str(tmp_path / "e.npz"),
                 "--layer", "all", "--max-length", "12"]) == 0  # p3 in windows
    with np.load(tmp_path / "e.npz") as written:
        every_layer = np.stack([written["layer_0"], written["layer_1"], written["embeddings"]], axis=1)
    vectors = model.embed(list(PROTEINS.values()), layer="all", max_length=12)
    assert vectors.shape == (3, 3, 16) and vectors.dtype == np.float32
    np.testing.assert_array_equal(vectors, every_layer)
    np.testing.assert_array_equal(model.embed(list(PROTEINS.values()), max_length=12), every_layer[:, -1])
    per_token = model.embed("MKTAY", pool="none")
    assert len(per_token) == 1 and per_token[0].shape == (5, 16)
    assert model.embed([]).shape == (0, 16)


def test_score_equals_the_score_command(protein_model, fasta, tmp_path, capsys):
    assert main(["score", "--model", str(protein_model), "--input", str(fasta), "--output",
                 str(tmp_path / "s.csv")]) == 0
    written = read_table(tmp_path / "s.csv")
    table = biotf.Model.load(protein_model).score(list(PROTEINS.values()), ids=list(PROTEINS))
    assert list(table.columns) == [name for name in written[0] if name != "description"]  # FASTA's metadata
    assert list(table["id"]) == list(PROTEINS) and set(table["method"]) == {"pll"}
    assert table["log_likelihood"].tolist() == [float(row["log_likelihood"]) for row in written]
    assert table["perplexity"].tolist() == pytest.approx([float(row["perplexity"]) for row in written], rel=1e-12)


def test_predict_equals_the_predict_command(tmp_path, fasta, capsys):
    torch.manual_seed(0)
    tokenizer = AminoAcidTokenizer()
    trunk = Transformer(TransformerConfig(vocab_size=33, d_model=16, n_layers=1, n_heads=2, d_ff=32, max_seq_len=64))
    task = TaskModel(trunk, "classification", 2, pool="mean")
    directory = save_task_model(task, tokenizer, TaskInfo("classification", ["no", "yes"], "mean", 16, "crop"),
                                tmp_path / "fine-tuned")
    assert main(["predict", "--model", str(directory), "--input", str(fasta), "--output", str(tmp_path / "p.csv")]) == 0
    model = biotf.Model.load(directory)
    assert model.kind == "fine-tuned export" and model.task_info.classes == ["no", "yes"]
    table = model.predict(list(PROTEINS.values()), ids=list(PROTEINS))
    assert table.to_dict("records") == read_table(tmp_path / "p.csv")
    # its trunk does every other job
    assert model.embed("MKT").shape == (1, 16)


def test_contacts_equal_the_contacts_command(random_esm, save_esm, tmp_path, fasta, capsys):
    directory = save_esm(random_esm(seed=7, query_key_std=0.3), tmp_path / "esm")
    assert main(["contacts", "--model", str(directory), "--input", str(fasta),
                 "--output", str(tmp_path / "c.npz")]) == 0
    maps = biotf.Model.load(directory).contacts(list(PROTEINS.values()), ids=list(PROTEINS))
    with np.load(tmp_path / "c.npz") as written:
        for (name, sequence), found in zip(PROTEINS.items(), maps):
            assert found.shape == (len(sequence), len(sequence))
            np.testing.assert_array_equal(found, written[f"contacts/{name}"])


def test_every_job_reads_past_max_seq_len_where_positions_extend(protein_model, random_esm, save_esm, tmp_path):
    """The RoPE protein model (max_seq_len 32) embeds and scores a 40-residue protein in one window, the RoPE ESM
    (66) maps one of 70 residues, each with a warning naming the trained length."""
    model, protein = biotf.Model.load(protein_model), "MKTAYIAKQR" * 4
    with pytest.warns(BiotfWarning, match="past the 32 tokens"):
        assert model.embed(protein, max_length=42).shape == (1, 16)
    with pytest.warns(BiotfWarning, match="past the 32 tokens"):
        assert model.score(protein, max_length=42)["windows"].tolist() == [1]
    esm = biotf.Model.load(save_esm(random_esm(seed=7), tmp_path / "esm"))
    with pytest.warns(BiotfWarning, match="past the 66 tokens"):
        assert esm.contacts("MKV" * 23 + "A", max_length=72)[0].shape == (70, 70)


def test_generate_equals_the_generate_command(tmp_path, capsys):
    directory = save_tiny_protein_model(tmp_path / "causal", max_seq_len=24, causal=True)
    assert main(["generate", "--model", str(directory), "--prompt", "MK", "--max-new-tokens", "8"]) == 0
    streamed = capsys.readouterr().out
    model = biotf.Model.load(directory)
    assert model.generate("MK", max_new_tokens=8) == [streamed.removesuffix("\n")]
    drawn = model.generate(["MK", "GA"], max_new_tokens=6, temperature=1.0, seed=3)
    assert drawn == model.generate(["MK", "GA"], max_new_tokens=6, temperature=1.0, seed=3) and len(drawn) == 2


def test_save_writes_an_export_that_loads_the_same(protein_model, tmp_path):
    model = biotf.Model.load(protein_model)
    again = biotf.Model.load(model.save(tmp_path / "copy"))
    np.testing.assert_array_equal(again.embed("MKTAYIAKQR"), model.embed("MKTAYIAKQR"))
    assert again.tokenizer.fingerprint == model.tokenizer.fingerprint


def test_a_job_the_model_cannot_do_is_refused_in_one_line(protein_model):
    model = biotf.Model.load(protein_model)
    with pytest.raises(CheckpointError, match="is not a fine-tuned model"):
        model.predict("MKT")
    with pytest.raises(CheckpointError, match=r"is a masked-LM \(causal: false\), which cannot generate"):
        model.generate("MK")
    with pytest.raises(ConfigError, match="has no contact head"):
        model.contacts("MKT")
    with pytest.raises(ConfigError, match="one id per sequence"):
        model.embed(["MKT", "GAV"], ids=["only one"])
    with pytest.raises(ConfigError, match="allowed: float32, bfloat16"):
        biotf.Model.load(protein_model, dtype="float16")


def test_tokenizer_options_change_policies_as_option_does(protein_model):
    with pytest.raises(biotf.TokenizationError, match="unexpected character"):
        biotf.Model.load(protein_model).embed("MKT*A")
    model = biotf.Model.load(protein_model, tokenizer_options={"stop": "to_unk"})
    assert model.embed("MKT*A").shape == (1, 16)
