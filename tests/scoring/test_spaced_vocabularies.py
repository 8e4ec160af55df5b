"""`biotf score` on a ProtBert-style checkpoint (a BERT whose WordPiece vocabulary is one residue per word, typed
with spaces): a FASTA of plain sequences scores as `transformers` scores the spaced text (pseudo-log-likelihood with
one mask per forward; masked-marginal with every mutated residue masked), and `residues` counts residues."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from hf_tokenizer_dirs import PROTBERT_VOCAB, write_tokenizer

from biotf.cli import main

transformers = pytest.importorskip("transformers")
WILD_TYPE = "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ"
OTHER = "MSTNPKPQRKTKRNTNRRPQDVKFPGG"
TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def protbert(tmp_path_factory, random_encoder):
    """A tiny random BertForMaskedLM over ProtBert's vocabulary, saved with its vocab.txt as the hub holds it."""
    directory = tmp_path_factory.mktemp("protbert")
    model = random_encoder("bert", vocab_size=len(PROTBERT_VOCAB), pad_token_id=0, max_positions=64, seed=5)
    model.save_pretrained(directory)
    write_tokenizer("protbert", directory, [])
    return directory, model, transformers.AutoTokenizer.from_pretrained(directory)


def log_probs(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([ids])).logits[0].double(), dim=-1)


def pseudo_log_likelihood(model, tokenizer, sequence: str) -> float:
    """transformers on the spaced text: each residue masked alone, one forward each."""
    ids = tokenizer(" ".join(sequence))["input_ids"]
    total = 0.0
    for position in range(1, len(ids) - 1):
        masked = list(ids)
        masked[position] = tokenizer.mask_token_id
        total += log_probs(model, masked)[position, ids[position]].item()
    return total


def masked_marginal(model, tokenizer, mutations: list[tuple[str, int, str]]) -> float:
    ids = tokenizer(" ".join(WILD_TYPE))["input_ids"]
    for _, position, _ in mutations:
        ids[position + 1] = tokenizer.mask_token_id
    table = log_probs(model, ids)
    token = tokenizer.convert_tokens_to_ids
    return sum(table[p + 1, token(alt)].item() - table[p + 1, token(wt)].item() for wt, p, alt in mutations)


def run(capsys, *args) -> tuple[int, str]:
    status = main(["score", "--no-progress", *map(str, args)])
    return status, capsys.readouterr().err


def test_a_fasta_of_plain_sequences_scores_as_transformers_scores_the_spaced_text(protbert, tmp_path, capsys):
    directory, model, tokenizer = protbert
    fasta = tmp_path / "p.fasta"
    fasta.write_text(f">wt\n{WILD_TYPE}\n>other\n{OTHER}\n")
    status, err = run(capsys, "--model", directory, "--input", fasta, "--output", tmp_path / "s.csv")
    assert status == 0, err
    assert "2 records scored by pll" in err and "spaced_residues=2" in err
    table = pd.read_csv(tmp_path / "s.csv")
    assert table["residues"].tolist() == [len(WILD_TYPE), len(OTHER)]
    assert table["tokens"].tolist() == [len(WILD_TYPE), len(OTHER)]
    for sequence, value in zip((WILD_TYPE, OTHER), table["log_likelihood"]):
        assert abs(value - pseudo_log_likelihood(model, tokenizer, sequence)) <= TOLERANCE
    spaced = tmp_path / "spaced.csv"  # typed with spaces, as transformers' users type it: the same scores
    spaced.write_text(f"id,sequence\nwt,{' '.join(WILD_TYPE)}\n")
    status, err = run(capsys, "--model", directory, "--input", spaced, "--output", tmp_path / "t.csv")
    assert status == 0, err
    again = pd.read_csv(tmp_path / "t.csv")
    assert again["residues"].tolist() == [len(WILD_TYPE)]
    assert abs(again["log_likelihood"][0] - table["log_likelihood"][0]) <= 1e-9


def test_masked_marginal_scores_variants_of_a_plain_reference(protbert, tmp_path, capsys):
    directory, model, tokenizer = protbert
    variants = tmp_path / "dms.csv"
    variants.write_text("mutant,DMS_score\nA4G,0.5\nK2R:I6L,-1.25\n")
    status, err = run(capsys, "--model", directory, "--variants", variants, "--reference", WILD_TYPE,
                      "--method", "masked-marginal", "--output", tmp_path / "v.csv")
    assert status == 0, err
    scores = pd.read_csv(tmp_path / "v.csv")
    assert set(scores["method"]) == {"masked-marginal"}
    expected = [masked_marginal(model, tokenizer, [("A", 3, "G")]),
                masked_marginal(model, tokenizer, [("K", 1, "R"), ("I", 5, "L")])]
    assert max(abs(a - b) for a, b in zip(scores["score"], expected)) <= TOLERANCE
    status, err = run(capsys, "--model", directory, "--variants", variants, "--reference", WILD_TYPE,
                      "--output", tmp_path / "auto.csv")  # auto picks masked-marginal: one token per residue
    assert status == 0, err
    assert set(pd.read_csv(tmp_path / "auto.csv")["method"]) == {"masked-marginal"}


def test_spacing_none_reads_the_text_as_given_and_refuses_masked_marginal(protbert, tmp_path, capsys):
    directory, _, _ = protbert
    variants = tmp_path / "dms.csv"
    variants.write_text("mutant\nA4G\n")
    status, err = run(capsys, "--model", directory, "--variants", variants, "--reference", WILD_TYPE,
                      "--method", "masked-marginal", "--option", "spacing=none", "--output", tmp_path / "v.csv")
    assert status == 2 and "does not make one token per residue" in err and err.count("\n") == 1


def test_the_python_api_and_embed_type_plain_sequences_the_same_way(protbert, tmp_path, capsys):
    """`biotf.Model` scores a plain string as the command does; `biotf embed` embeds it as transformers embeds the
    spaced text (mean over residues) and records the convention in the file's info."""
    import json

    import numpy as np

    from biotf import Model

    directory, model, tokenizer = protbert
    scored = Model.load(directory).score([WILD_TYPE])
    assert scored["residues"].tolist() == [len(WILD_TYPE)]
    assert abs(scored["log_likelihood"][0] - pseudo_log_likelihood(model, tokenizer, WILD_TYPE)) <= TOLERANCE
    fasta = tmp_path / "p.fasta"
    fasta.write_text(f">wt\n{WILD_TYPE}\n")
    assert main(["embed", "--no-progress", "--model", str(directory), "--input", str(fasta), "--output",
                 str(tmp_path / "e.npz")]) == 0, capsys.readouterr().err
    data = np.load(tmp_path / "e.npz", allow_pickle=False)
    assert json.loads(str(data["info"]))["tokenizer_input"] == {
        "spacing": "residues (detected from the vocabulary)", "rare_residues": "keep"}
    with torch.no_grad():
        hidden = model.bert(**tokenizer(" ".join(WILD_TYPE), return_tensors="pt")).last_hidden_state[0, 1:-1]
    assert np.abs(data["embeddings"][0] - hidden.mean(0).numpy()).max() <= TOLERANCE
