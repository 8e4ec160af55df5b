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
    assert scores.columns.tolist() == ["id", "variant", "mutations", "method", "precision", "score", "DMS_score"]
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
    assert set(table["precision"]) == {"fp32"}  # what the model computed in, on every row
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
    assert status == 2 and "--reference is required with --variants: the variants are scored against a reference" \
        in err and "None" not in err and "config" not in err
    status, err = run(capsys, "--model", saved_protein_mlm, "--variants", table, "--reference", WILD_TYPE,
                      "--output", tmp_path / "o.csv")
    assert status == 2 and "no mutation column (mutant, mutation, mutations, variant) and no pos, ref, alt" in err
    table.write_text("mutant,score\nA4G,1\n")
    status, err = run(capsys, "--model", saved_protein_mlm, "--variants", table, "--reference", WILD_TYPE,
                      "--output", tmp_path / "o.csv")
    assert status == 2 and "input column 'score' has the name of an output column" in err


# --- the output rule of every command (biotf/io/outputs.py), checked before the model loads --------------
def one_line(status: int, err: str, *fragments: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_output_never_replaces_an_input_and_an_existing_file_needs_overwrite(saved_protein_mlm, tmp_path, capsys):
    """Refusals name the output and come before the model is read (a --model that does not exist is never
    reached); with --overwrite an existing output is replaced, an input never (links included)."""
    missing_model = tmp_path / "no-such-model"
    variants, sequences, reference = tmp_path / "v.csv", tmp_path / "p.tsv", tmp_path / "wt.csv"
    variants.write_text("mutant\nA4G\n")
    sequences.write_text(f"sequence\n{WILD_TYPE}\n")
    reference.write_text(f"sequence\n{WILD_TYPE}\n")
    link = tmp_path / "link.csv"
    link.symlink_to(variants)
    originals = {path: path.read_bytes() for path in (variants, sequences, reference)}
    for output in (variants, link, reference):
        for extra in ([], ["--overwrite"]):
            status, err = run(capsys, "--model", missing_model, "--variants", variants, "--reference", reference,
                              "--output", output, *extra)
            one_line(status, err, f"--output {output} is the input")
    status, err = run(capsys, "--model", missing_model, "--input", sequences, "--output", sequences, "--overwrite")
    one_line(status, err, "is the input")
    assert {path: path.read_bytes() for path in originals} == originals
    existing = tmp_path / "scores.csv"
    existing.write_text("last week's scores\n")
    status, err = run(capsys, "--model", missing_model, "--variants", variants, "--reference", WILD_TYPE,
                      "--output", existing)
    one_line(status, err, "already exists", "--overwrite")
    assert existing.read_text() == "last week's scores\n"
    status, err = run(capsys, "--model", saved_protein_mlm, "--variants", variants, "--reference", WILD_TYPE,
                      "--output", existing, "--overwrite")
    assert status == 0, err
    assert pd.read_csv(existing)["variant"].tolist() == ["A4G"]


@pytest.mark.parametrize("where", ["parent_is_a_file", "output_is_a_directory"])
def test_impossible_output_path_is_one_line_before_the_model_loads(tmp_path, capsys, where):
    fasta = tmp_path / "p.fasta"
    fasta.write_text(f">a\n{WILD_TYPE}\n")
    output = fasta / "s.csv" if where == "parent_is_a_file" else tmp_path / "s.csv"
    if where == "output_is_a_directory":
        output.mkdir()
    status, err = run(capsys, "--model", tmp_path / "no-such-model", "--input", fasta, "--output", output,
                      "--overwrite")
    one_line(status, err, f"--output {output}", "is a file" if where == "parent_is_a_file" else "directory")


def test_a_failed_overwrite_keeps_the_old_file(saved_protein_mlm, tmp_path, capsys):
    variants, output = tmp_path / "v.csv", tmp_path / "s.csv"
    variants.write_text("mutant\nA4G\nQ12R\n")  # the reference has I at 12: refused after the model loaded
    output.write_text("old\n")
    status, err = run(capsys, "--model", saved_protein_mlm, "--variants", variants, "--reference", WILD_TYPE,
                      "--output", output, "--overwrite")
    one_line(status, err, "Q12R does not match the reference")
    assert output.read_text() == "old\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["s.csv", "v.csv"]


# --- the reference: a file or a literal, never a missing file taken for letters ----------------------------
@pytest.mark.parametrize("name", ["wt.fa", "wt.fasta.gz", "WT.txt", "refs/wt.fa"])
def test_a_reference_that_looks_like_a_path_must_exist(saved_protein_mlm, tmp_path, capsys, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "v.csv").write_text("mutant\nT2A\n")  # read as letters, "wt.fa" is W T . F A: T2A would score
    status, err = run(capsys, "--model", saved_protein_mlm, "--variants", "v.csv", "--reference", name,
                      "--output", "s.csv")
    one_line(status, err, f"reference file {name} does not exist")
    assert not (tmp_path / "s.csv").exists()


def test_the_summary_says_which_reference_was_taken(saved_protein_mlm, tmp_path, capsys):
    variants, reference = tmp_path / "v.csv", tmp_path / "wt.fasta"
    variants.write_text("mutant\nA4G\n")
    reference.write_text(f">P1 wild type\n{WILD_TYPE}\n")
    status, err = run(capsys, "--model", saved_protein_mlm, "--variants", variants, "--reference", reference,
                      "--output", tmp_path / "a.csv")
    assert status == 0 and f"reference: file {reference} (record P1, 33 residues)" in err, err
    status, err = run(capsys, "--model", saved_protein_mlm, "--variants", variants, "--reference", WILD_TYPE,
                      "--output", tmp_path / "b.csv")
    assert status == 0 and "reference: literal sequence (33 residues)" in err, err
    assert pd.read_csv(tmp_path / "a.csv")["score"].tolist() == pd.read_csv(tmp_path / "b.csv")["score"].tolist()


# --- variants files as every other file: BOM and any line ending, through the shared readers ----------------
@pytest.mark.parametrize("name, content", [
    ("bom.csv", b"\xef\xbb\xbfmutant,DMS_score\nA4G,0.5\nK2R:I6L,-1\n"),
    ("cr.csv", b"mutant,DMS_score\rA4G,0.5\rK2R:I6L,-1\r"),
    ("bom_crlf.csv", b"\xef\xbb\xbfmutant,DMS_score\r\nA4G,0.5\r\nK2R:I6L,-1\r\n"),
    ("bom_cr.tsv", b"\xef\xbb\xbfpos\tref\talt\tDMS_score\r4\tA\tG\t0.5\r2\tK\tR\t-1\r"),
])
def test_variants_files_with_a_bom_or_cr_line_endings_read_like_plain_ones(saved_protein_mlm, tmp_path, capsys,
                                                                           name, content):
    plain = tmp_path / "plain.csv"
    plain.write_text("mutant,DMS_score\nA4G,0.5\nK2R:I6L,-1\n" if name.endswith(".csv")
                     else "mutant,DMS_score\nA4G,0.5\nK2R,-1\n")
    messy = tmp_path / name
    messy.write_bytes(content)
    tables = []
    for source in (plain, messy):
        status, err = run(capsys, "--model", saved_protein_mlm, "--variants", source, "--reference", WILD_TYPE,
                          "--output", tmp_path / f"{source.stem}.out.csv")
        assert status == 0, err
        tables.append(pd.read_csv(tmp_path / f"{source.stem}.out.csv"))
    assert ("byte_order_mark_stripped=1" in err) == name.startswith("bom")
    columns = ["variant", "score", "DMS_score"]
    pd.testing.assert_frame_equal(tables[1][columns], tables[0][columns])


# --- --both-strands is for DNA; an error about the reference names the reference file -----------------------
def test_both_strands_on_a_protein_model_is_one_line_naming_the_flag(saved_protein_mlm, tmp_path, capsys):
    variants = tmp_path / "v.csv"
    variants.write_text("mutant\nA4G\n")
    status, err = run(capsys, "--model", saved_protein_mlm, "--variants", variants, "--reference", WILD_TYPE,
                      "--both-strands", "--output", tmp_path / "s.csv")
    one_line(status, err, "invalid --both-strands: the model's protein tokenizer reads no DNA")
    assert not (tmp_path / "s.csv").exists()


@pytest.mark.parametrize("method", ["masked-marginal", "pll"])
def test_an_error_in_the_reference_names_the_reference_file(saved_protein_mlm, tmp_path, capsys, method):
    variants, reference = tmp_path / "v.csv", tmp_path / "wt.fasta"
    variants.write_text("mutant\nA4G\n")
    reference.write_text(f">wt\n{WILD_TYPE[:10]}1{WILD_TYPE[11:]}\n")
    status, err = run(capsys, "--model", saved_protein_mlm, "--variants", variants, "--reference", reference,
                      "--method", method, "--output", tmp_path / "s.csv")
    one_line(status, err, f"unexpected character '1' (U+0031) at file {reference}, record 'wt', position 10")
    assert str(variants) not in err


def test_summaries_say_1_record_and_1_window(saved_protein_mlm, tmp_path, capsys):
    from biotf.export.embed import EmbedStats

    fasta = tmp_path / "p.fasta"
    fasta.write_text(f">a\n{WILD_TYPE}\n")
    status, err = run(capsys, "--model", saved_protein_mlm, "--input", fasta, "--output", tmp_path / "s.csv")
    assert status == 0 and "1 record scored by pll, 33 tokens in 1 window (0 records chunked)" in err, err
    assert EmbedStats(records=1, tokens=1, windows=1, truncated_tokens=1).summary().startswith(
        "1 record, 1 token in 1 window; 0 chunked, 0 truncated (1 token cut)")


# --- --packing: the same table from fewer pad tokens --------------------------------------------------------------
def test_packing_writes_the_unpacked_table(saved_protein_mlm, tmp_path, capsys):
    fasta = tmp_path / "p.fasta"
    fasta.write_text(f">b first\n{WILD_TYPE}\n>a\nMSTNPKPQ\n>c\nMA\n>d long\n{WILD_TYPE * 3}\n>e\nGAVLIPF\n")
    tables = {}
    for name, extra in (("plain", ()), ("packed", ("--packing",))):
        status, err = run(capsys, "--model", saved_protein_mlm, "--input", fasta, "--output", tmp_path / f"{name}.csv",
                          *extra)
        assert status == 0, err
        assert ("5 records scored by pll (packed rows), " in err) is bool(extra), err
        tables[name] = pd.read_csv(tmp_path / f"{name}.csv")
    plain, packed = tables["plain"], tables["packed"]
    assert packed["id"].tolist() == plain["id"].tolist() == ["b", "a", "c", "d", "e"]
    assert packed.drop(columns=["log_likelihood", "mean_per_token", "mean_per_residue", "perplexity"]).equals(
        plain.drop(columns=["log_likelihood", "mean_per_token", "mean_per_residue", "perplexity"]))
    assert (packed["log_likelihood"] - plain["log_likelihood"]).abs().max() <= 1e-5
    assert plain["windows"].tolist() == [1, 1, 1, 2, 1]


def test_packing_variants_scores_the_unpacked_variants(saved_protein_mlm, tmp_path, capsys):
    variants = tmp_path / "v.csv"
    variants.write_text("mutant\nA4G\nK2R:I6L\nQ33E\n")
    for method in ("masked-marginal", "pll"):
        scores = []
        for extra in ((), ("--packing",)):
            out = tmp_path / f"{method}{len(extra)}.csv"
            status, err = run(capsys, "--model", saved_protein_mlm, "--variants", variants, "--reference", WILD_TYPE,
                              "--method", method, "--output", out, *extra)
            assert status == 0, err
            scores.append(pd.read_csv(out))
        assert scores[1]["id"].tolist() == scores[0]["id"].tolist()
        assert (scores[1]["score"] - scores[0]["score"]).abs().max() <= 1e-5
