"""`biotf tokenize` through the real CLI entry point: output lines, summary, and one-line errors."""

from __future__ import annotations

import gzip
import re

import pytest

from biotf.cli import main


def tokenize(capsys, *args: str) -> tuple[int, str, str]:
    status = main(["tokenize", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_protein_tokens_and_summary(capsys, shared_data):
    status, out, err = tokenize(capsys, "--tokenizer", "protein", "--input",
                                str(shared_data / "proteins/esm_few_proteins.fasta"))
    assert status == 0
    lines = out.splitlines()
    assert len(lines) == 3
    first_id, tokens = lines[0].split("\t")
    assert first_id == "UniRef50_UPI0003108055" and tokens.startswith("<cls> M P A D A R E") and tokens.endswith("<eos>")
    assert "3 records" in err and "protein tokenizer" in err and "policies: nothing changed" in err


def test_ids_limit_and_policy_counts(capsys, shared_data):
    status, out, err = tokenize(capsys, "--tokenizer", "dna", "--option", "k=6", "--option", "stride=6",
                                "--input", str(shared_data / "dna/uci_splice.csv"), "--id-column", "instance_name",
                                "--ids", "--no-special-tokens", "--limit", "2")
    assert status == 0
    lines = out.splitlines()
    assert len(lines) == 2 and all(field.isdigit() for field in lines[0].split("\t")[1].split())
    assert "3190 records" in err  # the summary covers the whole file, not just the printed lines
    assert "iupac_to_N=4" in err  # R, S and two D in uci_splice (SOURCES.md) become N, counted
    assert "whitespace_stripped=" in err


def test_smiles_csv_column_and_gzip(capsys, shared_data, tmp_path):
    path = tmp_path / "m.csv.gz"
    path.write_bytes(gzip.compress(b"name,smiles,y\nethanol,CCO,1\nchloro,ClCBr,2\n"))
    status, out, err = tokenize(capsys, "--tokenizer", "smiles", "--input", str(path), "--column", "smiles",
                                "--id-column", "name", "--no-special-tokens")
    assert status == 0
    assert out.splitlines() == ["ethanol\tC C O", "chloro\tCl C Br"]


def test_saved_tokenizer_path(capsys, shared_data, tmp_path):
    from biotf.tokenizers.base import tokenizer_class

    import biotf.tokenizers  # noqa: F401 - registers the schemes

    saved = tokenizer_class("protein")(unknown="to_unk").save(tmp_path / "tok")
    fasta = tmp_path / "x.fasta"
    fasta.write_text(">a\nMKJ\n")
    status, out, err = tokenize(capsys, "--tokenizer", str(saved), "--input", str(fasta))
    assert status == 0 and out == "a\t<cls> M K <unk> <eos>\n"


@pytest.mark.parametrize("content, extra, message", [
    (None, [], r"input file .*missing\.fasta does not exist"),
    (b"", [], r"empty\.fasta: no records found .*empty"),
    (b"not a fasta\n", [], r"line 1: expected a FASTA header"),
    (b">a\nMKJ\n", [], r"unexpected character 'J' .* file .*bad\.fasta, record 'a', position 2"),
    (b"id,seq\n1,MK\n", ["--column", "sequence"], r"sequence column 'sequence' not found; columns: id, seq"),
    (b">a\nMK\n", ["--option", "colour=red"], r"invalid --option"),
])
def test_bad_input_is_one_line_and_status_2(capsys, tmp_path, content, extra, message):
    name = {None: "missing.fasta", b"": "empty.fasta"}.get(content, "bad.csv" if b"," in (content or b"") else "bad.fasta")
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    status, out, err = tokenize(capsys, "--tokenizer", "protein", "--input", str(path), *extra)
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("biotf tokenize: error: ")
    assert re.search(message, err), err


def test_unknown_tokenizer_lists_the_allowed(capsys, tmp_path):
    status, _, err = tokenize(capsys, "--tokenizer", "proteinz", "--input", str(tmp_path / "x.fasta"))
    assert status == 2 and "allowed:" in err and "protein" in err


def preset_names() -> list[str]:
    from biotf.conventions import CONF_DIR

    return sorted(path.stem for path in (CONF_DIR / "tokenizer").glob("*.yaml"))


@pytest.mark.parametrize("name", preset_names())
def test_every_tokenizer_preset_works_by_name(capsys, tmp_path, request, name):
    """Each `conf/tokenizer/<name>.yaml` (what `tokenizer=<name>` trains with) is also a `--tokenizer` name, with
    the preset's own options (dna_char: one base per token); bpe needs its `path` as an option."""
    from omegaconf import OmegaConf

    from biotf.tokenizers.build import build_tokenizer
    from biotf.conventions import CONF_DIR

    qwen_tokenizer_dir = request.getfixturevalue("qwen_tokenizer_dir") if name == "bpe" else None
    text = tmp_path / "x.txt"
    text.write_text({"smiles": "CCO\n", "protein": "MKV\n"}.get(name, "ACGTACGTAC\n"))
    extra = ["--option", f"path={qwen_tokenizer_dir}"] if name == "bpe" else []
    status, out, err = tokenize(capsys, "--tokenizer", name, *extra, "--input", str(text))
    assert status == 0, err
    config = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "tokenizer" / f"{name}.yaml"))
    expected = build_tokenizer({**config, **({"path": str(qwen_tokenizer_dir)} if name == "bpe" else {})})
    assert expected.fingerprint in err
    if name == "dna_char":
        assert out == "line1\t<cls> A C G T A C G T A C <eos>\n"


def test_bpe_preset_without_its_path_is_one_line(capsys, tmp_path):
    text = tmp_path / "x.txt"
    text.write_text("hello\n")
    status, _, err = tokenize(capsys, "--tokenizer", "bpe", "--input", str(text))
    assert status == 2 and err.count("\n") == 1 and "tokenizer.path=None" in err


def test_unknown_tokenizer_lists_presets_and_schemes(capsys, tmp_path):
    status, _, err = tokenize(capsys, "--tokenizer", "dna-char", "--input", str(tmp_path / "x.fasta"))
    assert status == 2 and all(name in err for name in preset_names())
