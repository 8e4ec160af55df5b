"""One rule in every command that reads records: a CSV/TSV column named `id` is the record id; `--option KEY=VALUE`
changes a policy of the model's tokenizer (so the stop codon's hint, stop='strip_terminal', is true everywhere) and
what it changed is counted in the summary; an error about a record names the input file."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from biotf.cli import main

TABLE = "id,sequence,note\nq1,MKVLAAGIVG,a\nq2,MSTNPKPQRK,b\n"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle, delimiter="\t" if path.suffix == ".tsv" else ","))


def one_line(status: int, err: str, *fragments: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.parametrize("name", ["table.csv", "table.tsv"])
def test_a_column_named_id_is_the_record_id_in_every_command(capsys, tmp_path, model_dir, classifier_dir, name):
    """Before, score refused this file ('id' has the name of an output column) and predict numbered rows 0, 1."""
    table = tmp_path / name
    table.write_text(TABLE if name.endswith(".csv") else TABLE.replace(",", "\t"))
    status, out, err = run_cli(capsys, "tokenize", "--tokenizer", "protein", "--input", str(table))
    assert status == 0 and [line.split("\t")[0] for line in out.splitlines()] == ["q1", "q2"], err
    status, _, err = run_cli(capsys, "embed", "--no-progress", "--model", str(model_dir), "--input", str(table),
                             "--output", str(tmp_path / "e.npz"))
    assert status == 0 and np.load(tmp_path / "e.npz")["ids"].tolist() == ["q1", "q2"], err
    status, _, err = run_cli(capsys, "score", "--no-progress", "--model", str(model_dir), "--input", str(table),
                             "--output", str(tmp_path / "s.csv"))
    assert status == 0, err
    rows = read_rows(tmp_path / "s.csv")
    assert [r["id"] for r in rows] == ["q1", "q2"] and [r["note"] for r in rows] == ["a", "b"]
    status, _, err = run_cli(capsys, "predict", "--model", str(classifier_dir), "--input", str(table),
                             "--output", str(tmp_path / "p.tsv"))
    assert status == 0 and [r["id"] for r in read_rows(tmp_path / "p.tsv")] == ["q1", "q2"], err
    # --id-column still names another column (the `id` column is then metadata like any other)
    status, out, err = run_cli(capsys, "tokenize", "--tokenizer", "protein", "--input", str(table), "--id-column",
                               "note")
    assert status == 0 and [line.split("\t")[0] for line in out.splitlines()] == ["a", "b"], err


def test_every_command_that_tokenizes_takes_the_stop_policy_its_error_suggests(capsys, tmp_path, model_dir,
                                                                             classifier_dir):
    orfs = tmp_path / "orfs.fasta"
    orfs.write_text(">a\nMKVLAAGIVG*\n>b\nMSTNPKPQRK\n")
    commands = {
        "embed": ["embed", "--no-progress", "--model", str(model_dir), "--input", str(orfs)],
        "score": ["score", "--no-progress", "--model", str(model_dir), "--input", str(orfs)],
        "predict": ["predict", "--model", str(classifier_dir), "--input", str(orfs)],
    }
    outputs = {"embed": "e.npz", "score": "s.csv", "predict": "p.tsv"}
    for command, argv in commands.items():
        status, _, err = run_cli(capsys, *argv, "--output", str(tmp_path / f"refused-{outputs[command]}"))
        one_line(status, err, str(orfs), "record 'a', position 10", "stop='strip_terminal'")
        status, _, err = run_cli(capsys, *argv, "--output", str(tmp_path / outputs[command]),
                                 "--option", "stop=strip_terminal")
        assert status == 0 and "stop_stripped=1" in err, (command, err)
        status, _, err = run_cli(capsys, *argv, "--output", str(tmp_path / f"bad-{outputs[command]}"),
                                 "--option", "lowercase=shout")
        one_line(status, err, "--option lowercase='shout'", "fold | error")
    status, out, err = run_cli(capsys, "generate", "--model", str(model_dir), "--prompt", "MKV*", "--max-new-tokens",
                               "2", "--option", "stop=strip_terminal")
    assert status == 0 and "stop_stripped=1" in err, err
    status, _, err = run_cli(capsys, "generate", "--model", str(model_dir), "--prompt", "MKV*")
    one_line(status, err, "stop='strip_terminal'")
    # only policies change under a trained model: the protein tokenizer has no k
    status, _, err = run_cli(capsys, *commands["score"], "--output", str(tmp_path / "k.csv"), "--option", "k=3")
    one_line(status, err, "--option k=3", "not an option of tokenizer 'protein'")


@pytest.mark.parametrize("content, fragments", [
    (">a\nMKVJLA\n", ["record 'a', position 3", "unexpected character 'J'"]),
    ("name,seq\na,MKV\n", ["sequence column", "not found"]),
    ("id,sequence\na,MKV,extra\n", ["line 2", "3 fields, expected 2"]),
    ("", ["no records found", "the file is empty"]),
])
def test_predict_errors_name_the_input_file(capsys, tmp_path, classifier_dir, content, fragments):
    path = tmp_path / ("in.csv" if "," in content else "in.fasta")
    path.write_text(content)
    argv = ["predict", "--model", str(classifier_dir), "--input", str(path), "--output", str(tmp_path / "p.tsv")]
    if "name,seq" in content:
        argv += ["--column", "sequence"]
    status, _, err = run_cli(capsys, *argv)
    one_line(status, err, str(path), *fragments)
    assert not (tmp_path / "p.tsv").exists()


def test_predict_counts_what_reader_and_tokenizer_policies_changed(capsys, tmp_path, classifier_dir):
    table = tmp_path / "t.csv"
    table.write_text("id,sequence\nq1, mkvJ \nq1,MKV\n")
    status, _, err = run_cli(capsys, "predict", "--model", str(classifier_dir), "--input", str(table), "--output",
                             str(tmp_path / "p.csv"), "--option", "unknown=to_unk")
    assert status == 0, err
    policies = next(line for line in err.splitlines() if line.startswith("policies: "))
    assert policies == "policies: duplicate_ids=1, lowercase_folded=3, unknown_to_unk=1, whitespace_stripped=1"
    status, _, err = run_cli(capsys, "predict", "--model", str(classifier_dir), "--input", str(table), "--output",
                             str(tmp_path / "q.csv"))
    one_line(status, err, str(table), "record 'q1', position 3")
    assert json.loads((classifier_dir / "task.json").read_text())["task"] == "classification"
