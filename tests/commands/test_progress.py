"""Long commands say what they are doing: plain progress lines on stderr where stderr is not a terminal (a file, a
pipe; here pytest's capture), a single long record included (its windows, rows or layers), nothing on stdout, and
the summary line unchanged (`biotf.progress`)."""

from __future__ import annotations

import io
import re

import pytest

from biotf.cli import main
from biotf.errors import ConfigError
from biotf.progress import SECONDS_VARIABLE, Progress, line_seconds
from tiny_models import save_tiny_protein_model

LONG = "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQAPILSRVGDGTQDNLSGAEKAVQVKVKALPDAQFEVVHSLAKWKRQTLGQHDFSAGEGLYTHMKALRPDEDRLSPLHS"
LINE = re.compile(r"^(embedding|scoring|contacts|indexing|sampling|predicting) \S+: [\d,]+/(\?|[\d,]+) "
                  r"(tok|pos|residues|records|samples)|^loading \S+: \d+m\d\ds$")  # a load over the interval


@pytest.fixture(autouse=True)
def every_update(monkeypatch):
    monkeypatch.setenv(SECONDS_VARIABLE, "0")  # a line at every update instead of every 30 s


@pytest.fixture(scope="module")
def windowed_model(tmp_path_factory):
    """max_seq_len 16: the long record is many windows."""
    return save_tiny_protein_model(tmp_path_factory.mktemp("models") / "windowed")


@pytest.fixture(scope="module")
def one_pass_model(tmp_path_factory):
    """max_seq_len 512: the long record is one window, one forward."""
    return save_tiny_protein_model(tmp_path_factory.mktemp("models") / "one_pass", max_seq_len=512)


def run(capsys, *argv) -> tuple[str, list[str], list[str]]:
    assert main([str(a) for a in argv]) == 0
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    return captured.out, [line for line in lines if LINE.match(line)], [line for line in lines if not LINE.match(line)]


def one_record(tmp_path):
    path = tmp_path / "long.fasta"
    path.write_text(f">chloroplast\n{LONG}\n")
    return path


def test_embed_of_one_long_record_reports_its_windows(capsys, tmp_path, windowed_model):
    out, progress, others = run(capsys, "embed", "--model", windowed_model, "--input", one_record(tmp_path),
                                "--output", tmp_path / "e.npz", "--batch-tokens", 32)
    assert out == ""
    assert len(progress) > 3 and any(re.search(r"windows \d+/\d+ of this block", line) for line in progress)
    assert "tok/s" in progress[-1]
    assert len(others) == 1 and others[0].startswith(f"{tmp_path / 'long.fasta'} -> ")  # the summary as before


def test_embed_of_one_long_record_in_one_pass_reports_its_layers(capsys, tmp_path, one_pass_model):
    out, progress, _ = run(capsys, "embed", "--model", one_pass_model, "--input", one_record(tmp_path),
                           "--output", tmp_path / "e.npz")
    assert out == ""
    assert [line for line in progress if "layer 1/2" in line] and [line for line in progress if "layer 2/2" in line]


def test_embed_of_one_long_record_with_chunked_attention_reports_its_query_rows(capsys, monkeypatch, tmp_path):
    """ALiBi's bias over a long record is too large to build: attention runs in chunks of query rows, each layer
    says how far it has come (here a budget of 16 rows' masks of the 113-token record)."""
    from biotf.model.transformer import Transformer

    model = save_tiny_protein_model(tmp_path / "alibi", max_seq_len=512, pos="alibi")
    length, heads = len(LONG) + 2, 2
    monkeypatch.setattr(Transformer, "attention_element_budget", heads * length * 16)
    out, progress, _ = run(capsys, "embed", "--model", model, "--input", one_record(tmp_path),
                           "--output", tmp_path / "e.npz")
    assert out == ""
    rows = [m.groups() for line in progress if (m := re.search(r"layer (\d)/2: ([\d,]+)/([\d,]+) query rows", line))]
    assert {layer for layer, _, _ in rows} == {"1", "2"}
    done = [int(done) for layer, done, _ in rows if layer == "1"]
    step = done[0]  # ALiBi alone runs in blocks of keys (`alibi_blocks`), as many rows as the budget allows
    assert 1 < step < length and done == [*range(step, length, step), length]
    assert {total for _, _, total in rows} == {str(length)}


def test_score_of_one_long_record_reports_its_rows(capsys, tmp_path, one_pass_model):
    out, progress, others = run(capsys, "score", "--model", one_pass_model, "--input", one_record(tmp_path),
                                "--output", tmp_path / "s.csv", "--method", "pll", "--batch-tokens", 1024)
    assert out == ""
    rows = [re.search(r"rows ([\d,]+)/([\d,]+) of these records", line) for line in progress]
    done = [int(m.group(1).replace(",", "")) for m in rows if m]
    assert len(done) > 2 and done == sorted(done) and done[-1] == int(rows[-1].group(2).replace(",", ""))
    assert len(others) == 1 and " -> " in others[0]


def test_no_progress_prints_no_lines(capsys, tmp_path, one_pass_model):
    _, progress, _ = run(capsys, "embed", "--no-progress", "--model", one_pass_model, "--input",
                         one_record(tmp_path), "--output", tmp_path / "e.npz")
    assert progress == []


def test_contacts_counts_residues_of_a_known_total(capsys, tmp_path, random_esm, save_esm):
    directory = save_esm(random_esm(seed=7), tmp_path / "esm")
    fasta = tmp_path / "p.fasta"
    fasta.write_text(">P1\nMKTAYIAKQRQISFV\n>P2\nMSTNPKPQRK\n>P3\nMAW\n")
    out, progress, _ = run(capsys, "contacts", "--model", directory, "--input", fasta, "--output", tmp_path / "c.npz",
                           "--batch-pairs", 300)  # a protein a batch
    assert out == ""
    assert [line for line in progress if re.match(r"contacts p\.fasta: 15/28 residues \(53%\)", line)]
    assert any(line.startswith("contacts p.fasta: 28/28 residues (100%)") for line in progress)
    assert any("layer" in line for line in progress)


def test_search_build_and_generate_count_toward_their_totals(capsys, tmp_path, one_pass_model):
    pytest.importorskip("faiss")
    fasta = tmp_path / "p.fasta"
    fasta.write_text(">a\nMKTAYIAK\n>b\nMSTNPKPQ\n>c\nMAWQRST\n")
    run(capsys, "embed", "--no-progress", "--model", one_pass_model, "--input", fasta, "--output", tmp_path / "e.npz")
    out, progress, _ = run(capsys, "search", "build", "--embeddings", tmp_path / "e.npz", "--output", tmp_path / "ix",
                           "--index-type", "approx")
    assert out == "" and progress and progress[-1].startswith("indexing ix: 3/3 records (100%)")
    causal = save_tiny_protein_model(tmp_path / "causal", max_seq_len=32, causal=True)
    out, progress, _ = run(capsys, "generate", "--model", causal, "--num-samples", 4, "--batch-size", 2,
                           "--max-new-tokens", 5, "--output", tmp_path / "s.fasta")
    batches = [line.split(",")[0] for line in progress if "tokens into a batch" not in line]
    assert out == "" and batches == ["sampling s.fasta: 2/4 samples (50%)", "sampling s.fasta: 4/4 samples (100%)"]
    assert progress[-1].endswith("; 4 drawn")
    # within a batch, each token drawn is noted: a large model's first batch is not silent until its end
    assert [line for line in progress if line.endswith("; 0 drawn; 1 tokens into a batch of 2")]
    assert [line for line in progress if re.search(r"; 2 drawn; \d+ tokens into a batch of 2$", line)]


def test_predict_counts_the_records_it_predicted(capsys, tmp_path):
    import torch

    from biotf.checkpoint.task_model import TaskInfo, save_task_model
    from biotf.model import Transformer, TransformerConfig
    from biotf.model.heads import TaskModel
    from biotf.tokenizers import AminoAcidTokenizer

    torch.manual_seed(0)
    trunk = Transformer(TransformerConfig(vocab_size=33, d_model=16, n_layers=1, n_heads=2, d_ff=32, max_seq_len=64,
                                          causal=False))
    directory = save_task_model(TaskModel(trunk, "classification", 2, pool="mean"), AminoAcidTokenizer(),
                                TaskInfo("classification", ["no", "yes"], "mean", 32, "crop"), tmp_path / "task")
    fasta = tmp_path / "p.fasta"
    fasta.write_text(">a\nMKTAYIAK\n>b\nMSTNPKPQ\n>c\nMAWQRST\n")
    out, progress, _ = run(capsys, "predict", "--model", directory, "--input", fasta, "--output", tmp_path / "p.tsv",
                           "--batch-size", 2)
    assert [line.split(",")[0] for line in progress if "layer" not in line] == [
        "predicting p.fasta: 2/? records", "predicting p.fasta: 3/? records"]
    assert "prediction" in out  # predict's summary line is on stdout, as before


def test_lines_every_interval_with_rate_and_time_left():
    now = [0.0]
    stream = io.StringIO()
    shown = Progress("embedding x.fasta", "tok", total=1000, stream=stream, every_seconds=30, clock=lambda: now[0])
    now[0] = 10.0
    shown.update(100)  # within the interval: nothing
    now[0] = 40.0
    shown.update(300)
    shown.detail("windows 3/9 of this block")  # printed with the next due line
    now[0] = 80.0
    shown.update(100)
    assert stream.getvalue().splitlines() == [
        "embedding x.fasta: 400/1,000 tok (40%), 10 tok/s, 0m40s, ~1m00s left",
        "embedding x.fasta: 500/1,000 tok (50%), 6.25 tok/s, 1m20s, ~1m20s left; windows 3/9 of this block"]


def test_the_interval_is_one_constant_overridden_by_the_environment(monkeypatch):
    monkeypatch.delenv(SECONDS_VARIABLE)
    assert line_seconds() == 30.0
    monkeypatch.setenv(SECONDS_VARIABLE, "2.5")
    assert line_seconds() == 2.5
    monkeypatch.setenv(SECONDS_VARIABLE, "soon")
    with pytest.raises(ConfigError, match=SECONDS_VARIABLE):
        line_seconds()


def test_training_lines_follow_the_same_interval(monkeypatch):
    from biotf.training.fit_progress import ProgressLines

    monkeypatch.setenv(SECONDS_VARIABLE, "5")
    assert ProgressLines().every_seconds == 5.0


def summary_tokens(others: list[str]) -> int:
    return int(re.search(r"records?, ([\d,]+) tokens? in", others[-1]).group(1).replace(",", ""))


@pytest.mark.parametrize("long", ["chunk", "truncate"])
def test_embed_counts_the_tokens_its_summary_counts_and_knows_its_total(capsys, tmp_path, windowed_model, long):
    """Windows overlap and carry special tokens; a truncated record's cut tokens are still its tokens: the counter
    counts each content token once, as the summary does, and its total is known once the input is read."""
    fasta = tmp_path / "p.fasta"
    fasta.write_text(f">long\n{LONG}\n>short\nMKTAY\n>mid\n{LONG[:20]}\n")
    _, progress, others = run(capsys, "embed", "--model", windowed_model, "--input", fasta, "--output",
                              tmp_path / "e.npz", "--batch-tokens", 32, "--long", long)
    total = summary_tokens(others)
    assert total == len(LONG) + 5 + 20
    counted = [m.groups() for line in progress if (m := re.match(r"embedding p\.fasta: ([\d,]+)/([\d,?]+) tok", line))]
    assert counted[-1] == (f"{total:,}", f"{total:,}") and {of for _, of in counted} == {f"{total:,}"}
    done = [int(value.replace(",", "")) for value, _ in counted]
    assert done == sorted(done)


def test_a_one_pass_record_shows_its_total_and_no_rate_before_its_forward_ends(capsys, tmp_path, one_pass_model):
    _, progress, others = run(capsys, "embed", "--model", one_pass_model, "--input", one_record(tmp_path),
                              "--output", tmp_path / "e.npz")
    total = summary_tokens(others)
    first = next(line for line in progress if "layer 1/2" in line)
    assert re.match(rf"embedding long\.fasta: 0/{total} tok \(0%\), \dm\d\ds; layer 1/2$", first), first
    assert progress[-1].startswith(f"embedding long.fasta: {total}/{total} tok (100%), ")


def test_a_slow_model_load_says_so_every_interval_into_a_file(monkeypatch, tmp_path, one_pass_model):
    """Reading a large model's weights counts nothing: a line every interval says it is still loading (here a load
    of 1 s and an interval of 0.1 s, stderr a file); a fast load, and --no-progress, print none."""
    import sys
    import time

    from biotf.api import Model

    load = Model.load.__func__
    monkeypatch.setattr(Model, "load", classmethod(lambda cls, *a, **k: (time.sleep(1.0), load(cls, *a, **k))[1]))
    monkeypatch.setenv(SECONDS_VARIABLE, "0.1")
    log = tmp_path / "err.log"
    for extra in ([], ["--no-progress"]):
        with open(log, "w") as handle:
            monkeypatch.setattr(sys, "stderr", handle)
            assert main(["embed", *extra, "--model", str(one_pass_model), "--input", str(one_record(tmp_path)),
                         "--output", str(tmp_path / f"e{len(extra)}.npz")]) == 0
        lines = log.read_text().splitlines()
        loading = [line for line in lines if re.fullmatch(rf"loading {re.escape(str(one_pass_model))}: 0m0\ds", line)]
        if extra:
            assert loading == [] and len(lines) == 1
        else:
            assert len(loading) >= 3 and lines.index(loading[-1]) < len(lines) - 1  # before the work and its summary


def test_waiting_prints_nothing_for_a_quick_step_and_a_line_an_interval_for_a_slow_one():
    import time

    from biotf.progress import waiting

    stream = io.StringIO()
    with waiting(True, "quick", stream, every_seconds=10):
        pass
    assert stream.getvalue() == ""
    with waiting(True, "slow", stream, every_seconds=0.1):
        time.sleep(0.55)
    lines = stream.getvalue().splitlines()
    assert 2 <= len(lines) <= 6 and all(re.fullmatch(r"slow: 0m0[01]s", line) for line in lines)


def test_a_slow_projection_says_so_every_interval_into_a_file(monkeypatch, capsys, tmp_path, one_pass_model):
    """UMAP of thousands of records takes minutes on its first use (numba compiles it): `plot` and `embed --plot`
    say they are projecting every interval (here a projection of 1 s, an interval of 0.1 s, stderr a file)."""
    import sys
    import time

    import biotf.analysis.plot as plot

    fasta = tmp_path / "p.fasta"
    fasta.write_text(">a\nMKTAYIAK\n>b\nMSTNPKPQ\n>c\nMAWQRST\n")
    run(capsys, "embed", "--no-progress", "--model", one_pass_model, "--input", fasta, "--output", tmp_path / "e.npz")
    projected = plot.projected
    monkeypatch.setattr(plot, "projected", lambda *a, **k: (time.sleep(1.0), projected(*a, **k))[1])
    monkeypatch.setenv(SECONDS_VARIABLE, "0.1")
    log = tmp_path / "err.log"
    with open(log, "w") as handle:
        monkeypatch.setattr(sys, "stderr", handle)
        assert main(["plot", str(tmp_path / "e.npz"), "--output", str(tmp_path / "map.png")]) == 0
    lines = log.read_text().splitlines()
    assert len([line for line in lines if re.fullmatch(r"projecting 3 records of e\.npz: 0m0\ds", line)]) >= 3
    assert lines[-1].startswith("map (pca: 3 records, too few for UMAP's 15 neighbours) of ")


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")  # the thread must not die of it
def test_waiting_on_a_closed_stream_stops_announcing_and_lets_the_work_finish():
    import time

    from biotf.progress import waiting

    stream = io.StringIO()
    stream.close()
    with waiting(True, "slow", stream, every_seconds=0.05):
        time.sleep(0.2)
    assert stream.closed  # the block ended normally: no exception from the announcing thread reached it
