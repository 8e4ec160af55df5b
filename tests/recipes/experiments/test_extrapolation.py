"""Train short, test long: corpus chunking, the report on synthetic results, and the quick run end to end."""

from __future__ import annotations

import json

import pytest

from biotf.cli import main
from biotf.io.readers import ReaderOptions, read_records
from biotf_recipes.experiments import extrapolation
from biotf_recipes.experiments.runs import compose_config, read_run
from biotf.conventions import SAMPLES_DIR
from experiment_helpers import config, healthy, write_run


def test_chunked_genome_is_the_genome_cut_into_records(tmp_path):
    corpus = extrapolation.CORPORA["dna"]
    target = extrapolation.chunk_corpus(corpus, tmp_path / "dna.csv")
    chunks = [r.sequence for r in read_records(target, ReaderOptions(column="sequence", id_column="id"))]
    genome = "".join(r.sequence for r in read_records(SAMPLES_DIR / corpus.source))
    assert "".join(chunks) == genome and len(genome) == 154_478
    assert len(chunks) == -(-len(genome) // extrapolation.CHUNK_CHARACTERS)
    assert {len(c) for c in chunks[:-1]} == {extrapolation.CHUNK_CHARACTERS}


def test_missing_corpus_names_the_file(tmp_path):
    with pytest.raises(Exception, match="corpus file .*absent.gb is missing.*data/"):
        extrapolation.chunk_corpus(extrapolation.Corpus("absent.gb", "", ()), tmp_path / "x.csv")


def synthetic_results(tmp_path):
    """Two seeds per encoding; learned cannot extend; sinusoidal's second seed diverged in training."""
    losses = {"learned": [2.0, None, None, None], "sinusoidal": [2.1, 3.0, 4.5, 6.0],
              "rope": [2.0, 2.2, 2.5, 2.8], "alibi": [2.0, 1.95, 1.93, 1.92]}
    results = {"dna": {}}
    for pos, values in losses.items():
        runs = []
        for seed in (0, 1):
            rows = healthy() if (pos, seed) != ("sinusoidal", 1) else [(10, 3.0, 2.0), (20, float("nan"), 2.0)]
            run = read_run(write_run(tmp_path / pos / str(seed), config(pos, seed), rows))
            shifted = [None if v is None else v + 0.1 * seed for v in values]
            runs.append((run, dict(zip(extrapolation.EVAL_LENGTHS, shifted))))
        results["dna"][pos] = runs
    return results


def test_report_table_marks_learned_and_divergence(tmp_path):
    base = compose_config(["experiment=extrapolation"])
    report = extrapolation.write_report(tmp_path, synthetic_results(tmp_path), (0, 1), base, quick=False)
    rows = {line.split(" | ")[1]: line.split(" | ") for line in report.read_text().splitlines()
            if line.startswith("| dna |")}
    assert rows["learned"][3:6] == ["cannot extend"] * 3
    assert rows["alibi"][2] == "2.0500 (2.0000–2.1000)" and rows["alibi"][6] == "-3.9%"  # 1.97 / 2.05 - 1
    assert rows["rope"][6] == "+39.0%"  # 2.85 / 2.05 - 1
    assert "DIVERGED 1/2: non-finite train/loss" in rows["sinusoidal"][7]
    assert rows["rope"][7].startswith("ok")
    text = report.read_text()
    assert "Seeds: 2 (0, 1)" in text and "QUICK" not in text and "trained for 250 steps" in text
    assert (tmp_path / "extrapolation.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_quick_experiment_end_to_end(tmp_path, capsys):
    """`biotf experiment extrapolation --quick`: every encoding trained, evaluated and reported."""
    out = tmp_path / "extrapolation"
    assert main(["experiment", "extrapolation", "--quick", "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    assert report.startswith("# Train short, test long (QUICK setting")
    assert (out / "extrapolation.png").is_file() and "Seeds: 1 (0)" in report
    for pos in extrapolation.POSITIONS:
        losses = json.loads((out / "dna" / pos / "seed0" / extrapolation.RESULTS_FILE).read_text())
        assert set(losses) == {str(length) for length in extrapolation.EVAL_LENGTHS}
        measured = [v for v in losses.values() if v is not None]
        assert measured and all(0 < v < 3 for v in measured)  # below log(10 tokens) = 2.3: finite, sane
        assert (losses["256"] is None) == (pos == "learned")
    # A second run reuses the finished runs (no training) and writes the same report.
    before = (out / "dna" / "rope" / "seed0" / "summary.json").stat().st_mtime
    assert main(["experiment", "extrapolation", "--quick", "--out", str(out)]) == 0
    assert (out / "dna" / "rope" / "seed0" / "summary.json").stat().st_mtime == before
    assert (out / "report.md").read_text() == report
