"""End to end: `experiment=smiles_clm` trains a causal SMILES model on a slice of the shipped MOSES sample, and
`biotf generate --valid-only` draws molecules from it, saying how many invalid ones it drew."""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import re

import pytest

from biotf.cli import main
from biotf.conventions import SAMPLES_DIR
from biotf.entry import train as entry
from training_helpers import TINY


@pytest.fixture(scope="module")
def smiles_run(tmp_path_factory):
    """A causal SMILES run trained 30 steps on 300 molecules of the shipped MOSES sample, ending with the validity of
    40 samples (`trainer.validity_samples`; 1,000 in the preset): its directory and what training printed."""
    pytest.importorskip("rdkit")
    folder = tmp_path_factory.mktemp("smiles_clm")
    with gzip.open(SAMPLES_DIR / "moses_train_head20k.csv.gz", "rt") as handle:
        (folder / "slice.csv").write_text("".join(next(handle) for _ in range(301)))
    run_dir = folder / "run"
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(io.StringIO()) as printed:
        patch.chdir(folder)
        assert entry.main(["experiment=smiles_clm", *TINY, "model.causal=true", "trainer.max_steps=30",
                           "optim.lr=3e-3", "data.batch_size=16", f"data.path={folder / 'slice.csv'}",
                           "trainer.validity_samples=40", f"hydra.run.dir={run_dir}"]) == 0
    return run_dir, printed.getvalue()


def test_train_a_few_steps_then_draw_valid_smiles(tmp_path, smiles_run, capsys):
    from biotf.chemistry import is_valid

    run_dir, _ = smiles_run
    output = tmp_path / "molecules.csv"
    assert main(["generate", "--model", str(run_dir), "--num-samples", "3", "--valid-only", "--max-draws", "60",
                 "--seed", "0", "--batch-size", "16", "--output", str(output)]) == 0
    err = capsys.readouterr().err
    rows = list(csv.DictReader(output.open()))
    assert all(is_valid(row["sequence"]) and row["finished"] == "true" for row in rows)
    draws = int(re.search(rf"wrote {len(rows)} samples? to .* from (\d+) draws", err).group(1))
    invalid, unparsed, cut = map(int, re.search(r"invalid SMILES drawn: (\d+) \((\d+) not parsed by RDKit, (\d+) cut",
                                                err).groups())
    assert draws == len(rows) + invalid and invalid == unparsed + cut
    assert len(rows) == 3 or (draws == 60 and f"only {len(rows)} valid of the 3 asked within 60 draws" in err)


def test_the_run_ends_with_the_validity_of_its_samples_as_generate_draws_them(tmp_path, smiles_run):
    """The summary's line and summary.json say how many of the samples `biotf generate --num-samples 40 --seed 0`
    draws from the run RDKit parses."""
    import json

    from biotf.chemistry import is_valid

    run_dir, out = smiles_run
    (check,) = json.loads((run_dir / "summary.json").read_text())["checks"]
    assert check["name"] == "sample_validity" and check["values"]["samples"] == 40
    assert re.search(rf"  sample validity {check['values']['validity']:.3f} \({check['values']['valid']} valid of "
                     r"40 samples, \d+ unique; \d+ s\)", out), out
    output = tmp_path / "drawn.csv"
    assert main(["generate", "--model", str(run_dir), "--num-samples", "40", "--seed", "0", "--output",
                 str(output)]) == 0
    rows = list(csv.DictReader(output.open()))
    assert sum(row["finished"] == "true" and is_valid(row["sequence"]) for row in rows) == check["values"]["valid"]
