"""Two runs at once over one output: one output rule holds for the whole run. A second run over an output being
written is refused at once in one line; a file another program put there meanwhile is not replaced without
--overwrite; two `search add` on one index take turns (both records kept, exact and approximate index), and an
index opened as an add commits is read whole; a killed run's lock blocks no one and is removed by the next run.

The runs are real processes (forked copies of the test process: `forked_process`). They are made to overlap without
sleeps: the first run waits before its first rename at a FIFO (`BIOTF_PAUSE_BEFORE_PUBLISH`) until the test lets it
go, or the test process holds the lock itself."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

import numpy as np
import pytest

from biotf.io.atomic import PAUSE_BEFORE_PUBLISH
from biotf.cli import main
from biotf.io.outputs import hold
from forked_process import Forked

FASTA = b">p1 a\nMKVLAAGIVG\n>p2 b\nMSTNPKPQRK\n>p3 c\nMAAK\n"
OTHER = b">q1 a\nMKV\n>q2 b\nMST\n"


def biotf_process(*argv: str, pause: Path | None = None) -> Forked:
    """`biotf ARGV` as its own process (a forked copy of this one: `forked_process`); with `pause`, it waits at
    that FIFO before its first rename."""
    return Forked(main, list(argv), env={} if pause is None else {PAUSE_BEFORE_PUBLISH: str(pause)})


def paused(fifo: Path, process: Forked, timeout: float = 300.0) -> int:
    """Wait until `process` waits at `fifo` (it opened it to read); returns the end that lets it go (`release`)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:
            if error.errno != errno.ENXIO:  # ENXIO: nobody reads it yet
                raise
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"the first run never paused before its rename: {process.communicate()[1]}")
        time.sleep(0.05)  # polls a condition: the outcome never depends on this delay


def release(end: int) -> None:
    os.write(end, b"go\n")
    os.close(end)


def finished(process: Forked) -> tuple[int, str]:
    _, err = process.communicate(timeout=300)
    return process.returncode, err


def one_line(status: int, err: str, *fragments: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture
def inputs(tmp_path) -> tuple[Path, Path, Path]:
    first, second, fifo = tmp_path / "in.fasta", tmp_path / "other.fasta", tmp_path / "pause.fifo"
    first.write_bytes(FASTA)
    second.write_bytes(OTHER)
    os.mkfifo(fifo)
    return first, second, fifo


def embed_argv(model_dir: Path, source: Path, output: Path, *extra: str) -> list[str]:
    return ["embed", "--no-progress", "--model", str(model_dir), "--input", str(source), "--output", str(output),
            *extra]


def test_a_second_run_over_an_output_being_written_is_refused_at_once(tmp_path, model_dir, inputs):
    first, second, fifo = inputs
    out = tmp_path / "conc.npz"
    writing = biotf_process(*embed_argv(model_dir, first, out), pause=fifo)
    end = paused(fifo, writing)
    status, err = finished(biotf_process(*embed_argv(model_dir, second, out)))
    one_line(status, err, f"--output {out}", "another biotf run is writing it")
    release(end)
    status, err = finished(writing)
    assert status == 0, err
    assert list(np.load(out, allow_pickle=False)["ids"]) == ["p1", "p2", "p3"]  # the first run's, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conc.npz", "in.fasta", "other.fasta", "pause.fifo"]


@pytest.mark.parametrize("overwrite", [False, True])
def test_an_output_another_program_made_meanwhile_is_replaced_only_with_overwrite(tmp_path, model_dir, inputs,
                                                                                  overwrite):
    first, _, fifo = inputs
    out = tmp_path / "conc.npz"
    writing = biotf_process(*embed_argv(model_dir, first, out, *(["--overwrite"] if overwrite else [])), pause=fifo)
    end = paused(fifo, writing)
    out.write_text("not ours")  # after its check at the start, before its rename
    release(end)
    status, err = finished(writing)
    if overwrite:
        assert status == 0, err
        assert list(np.load(out, allow_pickle=False)["ids"]) == ["p1", "p2", "p3"]
    else:
        one_line(status, err, f"--output {out} appeared while this run was writing it", "--overwrite")
        assert out.read_text() == "not ours"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conc.npz", "in.fasta", "other.fasta", "pause.fifo"]


def test_a_killed_runs_lock_blocks_no_one_and_is_removed(capsys, tmp_path, model_dir, inputs):
    first, _, fifo = inputs
    out = tmp_path / "conc.npz"
    killed = biotf_process(*embed_argv(model_dir, first, out), pause=fifo)
    end = paused(fifo, killed)
    killed.kill()  # SIGKILL while it holds the lock: the kernel drops the lock, the file stays
    killed.communicate()
    os.close(end)
    assert (tmp_path / ".conc.npz.lock").is_file()
    assert main(embed_argv(model_dir, first, out)) == 0
    err = capsys.readouterr().err
    assert "leftover work file(s) of an interrupted run" in err and ".conc.npz.lock" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["conc.npz", "in.fasta", "other.fasta", "pause.fifo"]


def write_embeddings(path: Path, names: list[str], seed: int) -> Path:
    from biotf.io.readers import Record
    from biotf.io.embeddings import EmbeddingWriter, RecordEmbedding

    vectors = np.random.default_rng(seed).normal(size=(len(names), 8)).astype(np.float32)
    info = {"tokenizer": "protein", "pool": "mean", "layers": [2], "dim": 8, "model_fingerprint": "m",
            "tokenizer_fingerprint": "t"}
    with EmbeddingWriter(path, ["embeddings"], False, info) as writer:
        for position, (name, vector) in enumerate(zip(names, vectors)):
            writer.add(RecordEmbedding(Record(name, "ACDE", {}, position), vector[None]))
        writer.close()
    return path


@pytest.mark.parametrize("kind", ["exact", "approx"])
def test_two_adds_on_one_index_at_once_take_turns(tmp_path, kind):
    if kind == "approx":
        pytest.importorskip("faiss")
    from biotf.analysis.search.index import SearchIndex, build_index

    index = tmp_path / "ix"
    build_index(write_embeddings(tmp_path / "base.npz", [f"r{i}" for i in range(200)], 0), index, kind)
    more = [write_embeddings(tmp_path / f"{letter}.npz", [f"{letter}{i}" for i in range(30)], seed)
            for seed, letter in enumerate("ab", 1)]
    fifo = tmp_path / "pause.fifo"
    os.mkfifo(fifo)
    first = biotf_process("search", "add", "--index", str(index), "--embeddings", str(more[0]), pause=fifo)
    end = paused(fifo, first)  # holds the index, its new shard written, nothing committed
    second = biotf_process("search", "add", "--index", str(index), "--embeddings", str(more[1]))
    while "waiting" not in second.stderr_so_far():  # it says it waits: it reached the lock the first one holds
        assert second.poll() is None, f"the second add did not wait for the first: {second.communicate()[1]}"
        time.sleep(0.05)  # polls a condition: the outcome never depends on this delay
    release(end)
    results = [finished(first), finished(second)]
    assert [status for status, _ in results] == [0, 0], results
    assert "30 records added, 230 in all" in results[0][1] and "30 records added, 260 in all" in results[1][1]
    opened = SearchIndex.open(index)
    assert len(opened.ids) == 260 and opened.ids[-60:] == [*(f"a{i}" for i in range(30)), *(f"b{i}" for i in range(30))]
    assert kind == "exact" or opened.approx.ntotal == 260
    assert not (tmp_path / ".ix.lock").exists()



def test_an_index_opened_while_an_add_commits_is_read_whole(tmp_path, monkeypatch):
    """A query opening an approximate index just as an add commits (and removes the faiss file it replaced) reads
    the new index instead of failing with faiss's "could not open approx-200.faiss"."""
    faiss = pytest.importorskip("faiss")
    from biotf.analysis.search.index import SearchIndex, add_records, build_index

    index = tmp_path / "ix"
    build_index(write_embeddings(tmp_path / "base.npz", [f"r{i}" for i in range(200)], 0), index, "approx")
    more = write_embeddings(tmp_path / "a.npz", [f"a{i}" for i in range(30)], 1)
    read_index = faiss.read_index

    def add_first(name: str):  # between the query's read of index.json and of the faiss file it names
        monkeypatch.setattr(faiss, "read_index", read_index)
        add_records(index, more)
        return read_index(name)

    monkeypatch.setattr(faiss, "read_index", add_first)
    opened = SearchIndex.open(index)
    assert len(opened.ids) == 230 and opened.approx.ntotal == 230


def commands(tmp_path: Path, model_dir: Path, fasta: Path) -> dict[str, tuple[list[str], Path]]:
    """Every command that writes a file (or directory) the user names: its argv, and that output."""
    out = tmp_path / "out"
    return {
        "embed": (embed_argv(model_dir, fasta, out.with_suffix(".npz")), out.with_suffix(".npz")),
        "score": (["score", "--model", str(model_dir), "--input", str(fasta), "--output", str(out.with_suffix(".tsv"))],
                  out.with_suffix(".tsv")),
        "predict": (["predict", "--model", str(model_dir), "--input", str(fasta), "--output",
                     str(out.with_suffix(".tsv"))], out.with_suffix(".tsv")),
        "plot": (["plot", str(tmp_path / "e.npz"), "--output", str(out.with_suffix(".png"))], out.with_suffix(".png")),
        "compare": (["compare", str(tmp_path), "--out", str(out.with_suffix(".md"))], out.with_suffix(".md")),
        "tokens": (["tokens", "--model", str(model_dir), "--output", str(out.with_suffix(".tsv"))],
                   out.with_suffix(".tsv")),
        "contacts": (["contacts", "--model", str(model_dir), "--input", str(fasta), "--output",
                      str(out.with_suffix(".npz"))], out.with_suffix(".npz")),
        "contacts fit": (["contacts", "fit", "--model", str(model_dir), "--structures", str(tmp_path), "--output",
                          str(out)], out),
        "generate": (["generate", "--model", str(model_dir), "--num-samples", "2", "--output",
                      str(out.with_suffix(".fasta"))], out.with_suffix(".fasta")),
        "generate evaluate": (["generate", "evaluate", "--input", str(fasta), "--output",
                               str(out.with_suffix(".tsv"))], out.with_suffix(".tsv")),
        "search query": (["search", "query", "--index", str(tmp_path / "ix"), "--ids", "p1", "--output",
                          str(out.with_suffix(".tsv"))], out.with_suffix(".tsv")),
        "search build": (["search", "build", "--embeddings", str(tmp_path / "e.npz"), "--output", str(out)], out),
        "export-model": (["export-model", str(model_dir), str(out)], out),
    }


@pytest.mark.parametrize("command", ["embed", "score", "predict", "plot", "compare", "tokens", "contacts",
                                     "contacts fit", "generate", "generate evaluate", "search query", "search build",
                                     "export-model"])
def test_every_writer_refuses_an_output_another_run_holds(capsys, tmp_path, model_dir, command):
    fasta = tmp_path / "in.fasta"
    fasta.write_bytes(FASTA)
    write_embeddings(tmp_path / "e.npz", ["p1", "p2", "p3"], 0)
    argv, output = commands(tmp_path, model_dir, fasta)[command]
    before = sorted(p.name for p in tmp_path.iterdir())
    with hold(output):  # as another run over the same output does, from this test's own process
        status = main(argv)
        one_line(status, capsys.readouterr().err, str(output), "another biotf run is writing it")
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing made, the holder's lock removed by it
