"""`biotf score` end to end: the file layouts, the output tables and the one-line errors."""

from __future__ import annotations

import csv

import pandas as pd
import pytest
import scoring_helpers as reference

from biotf.cli import main
from biotf.checkpoint import save_pretrained
from biotf.tokenizers import KmerTokenizer

WILD_TYPE = "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ"


def run(capsys, *args: str) -> tuple[int, str]:
    status = main(["score", "--no-progress", *map(str, args)])
    return status, capsys.readouterr().err


def test_sequences_to_csv_in_input_order_with_metadata(saved_protein_mlm, protein_mlm, tmp_path, capsys):
    model, tokenizer = protein_mlm
    fasta = tmp_path / "p.fasta"
    fasta.write_text(f">b first one\n{WILD_TYPE}\n>a\nMSTNPKPQ\n")
    status, err = run(capsys, "--model", saved_protein_mlm, "--input", fasta, "--output", tmp_path / "s.csv")
    assert status == 0, err
    assert "2 records scored by pll" in err
    table = pd.read_csv(tmp_path / "s.csv")
    assert table["id"].tolist() == ["b", "a"]
    assert table["description"].fillna("").tolist() == ["first one", ""]
    for sequence, value in zip([WILD_TYPE, "MSTNPKPQ"], table["log_likelihood"]):
        assert abs(value - reference.pseudo_log_likelihood(model, tokenizer, sequence)) <= 1e-5
    assert (table["mean_per_residue"] * table["residues"] - table["log_likelihood"]).abs().max() <= 1e-9


def test_proteingym_csv_with_offset_to_parquet(saved_protein_mlm, protein_mlm, tmp_path, capsys):
    """fair-esm's layout: a `mutant` column numbered from --offset (TEM-1's DMS files use 24), labels kept."""
    model, tokenizer = protein_mlm
    table = tmp_path / "dms.csv"
    table.write_text("mutant,DMS_score\nA27G,0.5\nK25R:I29L,-1.25\n")
    status, err = run(capsys, "--model", saved_protein_mlm, "--variants", table, "--reference", WILD_TYPE,
                      "--offset", 24, "--output", tmp_path / "out.parquet")
    assert status == 0, err
    scores = pd.read_parquet(tmp_path / "out.parquet")
    assert scores.columns.tolist() == ["id", "variant", "mutations", "method", "score", "DMS_score"]
    assert scores["variant"].tolist() == ["A27G", "K25R:I29L"] and scores["DMS_score"].tolist() == ["0.5", "-1.25"]
    assert set(scores["method"]) == {"masked-marginal"}
    expected = [reference.masked_marginal(model, tokenizer, WILD_TYPE, [("A", 3, "G")]),
                reference.masked_marginal(model, tokenizer, WILD_TYPE, [("K", 1, "R"), ("I", 5, "L")])]
    assert (scores["score"] - expected).abs().max() <= 1e-5


def test_reference_mismatch_is_refused_naming_the_variant(saved_protein_mlm, tmp_path, capsys):
    table = tmp_path / "dms.csv"
    table.write_text("mutant\nA4G\nA4G:Q12R\n")
    status, err = run(capsys, "--model", saved_protein_mlm, "--variants", table, "--reference", WILD_TYPE,
                      "--output", tmp_path / "out.csv")
    assert status == 2
    assert err.strip().count("\n") == 0
    assert "variant '1 (row 2)': mutation Q12R does not match the reference, which has 'I' at position 12" in err
    assert not (tmp_path / "out.csv").exists()


def test_variant_sequences_in_fasta_are_their_difference(saved_protein_mlm, protein_mlm, tmp_path, capsys):
    model, tokenizer = protein_mlm
    reference_file = tmp_path / "wt.fasta"
    reference_file.write_text(f">wt\n{WILD_TYPE}\n")
    variants = tmp_path / "v.fasta"
    variants.write_text(f">same\n{WILD_TYPE}\n>double\nMRTAYIAKQRQISFVKSHFSRQLEERLGLIEVE\n")
    status, err = run(capsys, "--model", saved_protein_mlm, "--variants", variants, "--reference", reference_file,
                      "--method", "wt-marginal", "--output", tmp_path / "out.tsv")
    assert status == 0, err
    with open(tmp_path / "out.tsv") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    assert [(r["id"], r["variant"], r["mutations"]) for r in rows] == [("same", "", "0"), ("double", "K2R:Q33E", "2")]
    expected = reference.wt_marginal(model, tokenizer, WILD_TYPE, [("K", 1, "R"), ("Q", 32, "E")])
    assert float(rows[0]["score"]) == 0.0 and abs(float(rows[1]["score"]) - expected) <= 1e-5


def test_dna_pos_ref_alt_on_both_strands(tmp_path, capsys):
    from scoring_helpers import tiny_model

    tokenizer = KmerTokenizer(k=3, stride=3)
    model = tiny_model(tokenizer.vocab_size, causal=False, seed=4)
    model_dir = save_pretrained(model, tokenizer, tmp_path / "dna")
    dna = "ACGTTGCAAGGCTTAACGTAGGCATTACG"
    variants = tmp_path / "snv.tsv"
    variants.write_text("pos\tref\talt\tgene\n12\tC\tT\tx\n20\tAG\tA\ty\n5\t-\tGG\tz\n")
    status, err = run(capsys, "--model", model_dir, "--variants", variants, "--reference", dna, "--both-strands",
                      "--output", tmp_path / "out.csv")
    assert status == 0, err
    table = pd.read_csv(tmp_path / "out.csv")
    assert table["variant"].tolist() == ["C12T", "20AG>A", "5->GG"] and set(table["method"]) == {"pll"}
    assert ((table["score_forward"] + table["score_reverse"]) / 2 - table["score"]).abs().max() <= 1e-12
    pll = lambda sequence: reference.pseudo_log_likelihood(model, tokenizer, sequence)  # noqa: E731
    deletion = "ACGTTGCAAGGCTTAACGTAGCATTACG"
    assert abs(table["score_forward"][1] - (pll(deletion) - pll(dna))) <= 1e-5


def test_text_variants_and_bad_lines(saved_protein_mlm, tmp_path, capsys):
    lines = tmp_path / "v.txt"
    lines.write_text("A4G\nK2R:I6L\n")
    status, err = run(capsys, "--model", saved_protein_mlm, "--variants", lines, "--reference", WILD_TYPE,
                      "--output", tmp_path / "out.csv")
    assert status == 0, err
    assert pd.read_csv(tmp_path / "out.csv")["variant"].tolist() == ["A4G", "K2R:I6L"]
    lines.write_text("A4G\nA4 G\n")
    status, err = run(capsys, "--model", saved_protein_mlm, "--variants", lines, "--reference", WILD_TYPE,
                      "--output", tmp_path / "bad.csv")
    assert status == 2 and "line2: expected a code like A42G:K50R or 'pos ref alt', found 2 fields" in err


@pytest.mark.parametrize("args, message", [
    (["--output", "x.npz"], "unsupported extension '.npz' (allowed: .csv, .tsv, .parquet)"),
    (["--output", "x.csv", "--variants", "v.csv"], "exactly one of them"),
    (["--output", "x.csv", "--reference", "MK"], "--reference='MK': it needs --variants"),
])
def test_bad_arguments_are_one_line_errors(saved_protein_mlm, tmp_path, capsys, args, message):
    fasta = tmp_path / "p.fasta"
    fasta.write_text(">a\nMK\n")
    status, err = run(capsys, "--model", saved_protein_mlm, "--input", fasta, *args)
    assert status == 2 and message in err


def test_variants_need_a_reference_and_a_known_layout(saved_protein_mlm, tmp_path, capsys):
    table = tmp_path / "v.csv"
    table.write_text("name,score\nx,1\n")
    status, err = run(capsys, "--model", saved_protein_mlm, "--variants", table, "--output", tmp_path / "o.csv")
    assert status == 2 and "--variants are scored against a reference" in err
    status, err = run(capsys, "--model", saved_protein_mlm, "--variants", table, "--reference", WILD_TYPE,
                      "--output", tmp_path / "o.csv")
    assert status == 2 and "no mutation column (mutant, mutation, mutations, variant) and no pos, ref, alt" in err
    table.write_text("mutant,score\nA4G,1\n")
    status, err = run(capsys, "--model", saved_protein_mlm, "--variants", table, "--reference", WILD_TYPE,
                      "--output", tmp_path / "o.csv")
    assert status == 2 and "input column 'score' has the name of an output column" in err
