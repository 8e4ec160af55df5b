"""`biotf generate --num-samples N --output FILE`: files by extension, the summary's counts, one-line refusals."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
import torch

from biotf.cli import main


def save_tiny(directory: Path, kind: str, causal: bool = True) -> Path:
    from biotf.checkpoint import save_pretrained
    from biotf.model import Transformer, TransformerConfig
    from biotf.tokenizers import build_tokenizer

    tokenizer = build_tokenizer({"kind": kind})
    torch.manual_seed(0)
    config = TransformerConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_layers=1, n_heads=2, n_kv_heads=2,
                               d_ff=32, max_seq_len=32, causal=causal)
    return save_pretrained(Transformer(config), tokenizer, directory)


@pytest.fixture(scope="module")
def smiles_dir(tmp_path_factory) -> Path:
    return save_tiny(tmp_path_factory.mktemp("models") / "smiles", "smiles")


def generate(capsys, *args: str) -> tuple[int, str]:
    status = main(["generate", *args])
    return status, capsys.readouterr().err


def test_samples_by_extension_and_the_same_with_the_same_seed(smiles_dir, tmp_path, capsys):
    common = ["--model", str(smiles_dir), "--num-samples", "6", "--seed", "1"]
    status, err = generate(capsys, *common, "--output", str(tmp_path / "a.csv"), "--batch-size", "4")
    assert status == 0, err
    assert re.search(rf"wrote 6 samples to {re.escape(str(tmp_path / 'a.csv'))} from 6 draws .*seed 1; "
                     r"temperature 1.0, top-k none, top-p 1.0\)", err)
    rows = list(csv.DictReader((tmp_path / "a.csv").open()))
    assert [row["id"] for row in rows] == [f"sample_{i}" for i in range(1, 7)]
    assert set(rows[0]) == {"id", "sequence", "tokens", "log_prob", "finished"}
    assert generate(capsys, *common, "--output", str(tmp_path / "b.fasta"))[0] == 0
    assert (tmp_path / "b.fasta").read_text() == "".join(f">{row['id']}\n{row['sequence']}\n" for row in rows)
    assert generate(capsys, *common, "--output", str(tmp_path / "c.txt"), "--prompt", "CC")[0] == 0
    assert all(line.startswith("CC") for line in (tmp_path / "c.txt").read_text().splitlines())


def test_valid_only_counts_the_invalid_draws(smiles_dir, tmp_path, capsys):
    pytest.importorskip("rdkit")
    status, err = generate(capsys, "--model", str(smiles_dir), "--num-samples", "3", "--seed", "0", "--valid-only",
                           "--max-draws", "5", "--output", str(tmp_path / "v.fasta"))
    assert status == 0
    written = (tmp_path / "v.fasta").read_text().count(">")
    invalid = int(re.search(r"invalid SMILES drawn: (\d+) \((\d+) not parsed by RDKit, (\d+) cut", err).group(1))
    assert re.search(rf"wrote {written} samples? to .* from {written + invalid} draws", err)
    if written < 3:
        assert f"warning: only {written} valid of the 3 asked within {written + invalid} draws" in err


@pytest.mark.parametrize("args, message", [
    (["--num-samples", "2"], "--output is required with --num-samples"),
    (["--output", "x.fasta", "--prompt", "C"], "invalid --output='x.fasta': it belongs to drawing samples"),
    (["--num-samples", "2", "--output", "x.json"], r"--output x.json: unsupported extension '\.json' \(allowed: \.fasta, \.csv, \.txt\)"),
    (["--num-samples", "2", "--output", "x.txt", "--chat"], "--num-samples draws from one start"),
    (["--num-samples", "2", "--output", "x.txt", "--max-draws", "9"], "only --valid-only draws more"),
    (["--num-samples", "0", "--output", "x.txt"], r"invalid --num-samples=0 \(allowed: an integer >= 1\)"),
    (["--num-samples", "2", "--output", "x.txt", "--seed", "-1"],
     r"invalid --seed=-1 \(allowed: an integer from 0 to "),
    ([], "--prompt is required: give --prompt, --prompt-file, or --num-samples N --output FILE"),
])
def test_refusals_are_one_line(smiles_dir, tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    status, err = generate(capsys, "--model", str(smiles_dir), *args)
    assert status == 2 and err.count("\n") == 1 and err.startswith("biotf generate: error:"), err
    assert re.search(message, err), err
    assert not list(tmp_path.iterdir())


def test_a_masked_lm_a_non_smiles_valid_only_and_an_existing_output_are_refused(tmp_path, capsys):
    mlm = save_tiny(tmp_path / "mlm", "smiles", causal=False)
    status, err = generate(capsys, "--model", str(mlm), "--num-samples", "2", "--output", str(tmp_path / "m.txt"))
    assert status == 2 and "is a masked-LM (causal: false), which cannot generate" in err and err.count("\n") == 1
    protein = save_tiny(tmp_path / "protein", "protein")
    status, err = generate(capsys, "--model", str(protein), "--num-samples", "2", "--valid-only",
                           "--output", str(tmp_path / "p.txt"))
    assert status == 2 and "tokenizer is 'protein', not 'smiles'" in err and err.count("\n") == 1
    (tmp_path / "old.txt").write_text("keep\n")
    status, err = generate(capsys, "--model", str(protein), "--num-samples", "2", "--output", str(tmp_path / "old.txt"))
    assert status == 2 and "already exists; pass --overwrite" in err and (tmp_path / "old.txt").read_text() == "keep\n"
    assert generate(capsys, "--model", str(protein), "--num-samples", "2", "--output", str(tmp_path / "old.txt"),
                    "--overwrite")[0] == 0
    assert len((tmp_path / "old.txt").read_text().splitlines()) == 2


def test_a_runs_prompt_follows_an_eos_and_runs_to_its_positions(smiles_dir, capsys):
    """As CLM packing trained it (records joined by <eos>); no --max-new-tokens: what the 32 positions leave."""
    from biotf.inference.generation import generate_ids
    from biotf.api import Model

    assert main(["generate", "--model", str(smiles_dir), "--prompt", "CC"]) == 0
    out, err = capsys.readouterr()
    loaded = Model.load(smiles_dir)
    model, tokenizer, defaults = loaded.network, loaded.tokenizer, loaded.generation
    start = [tokenizer.eos_id] + tokenizer.encode("CC", add_special_tokens=False)
    ids = generate_ids(model, [start], max_new_tokens=32 - len(start), eos_token_ids=defaults.eos_token_ids)[0]
    assert out == tokenizer.decode(ids) + "\n" and f"{len(start)} prompt tokens, {len(ids)} new tokens" in err
