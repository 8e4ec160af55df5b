"""Nothing a user named is lost: outputs never replace their input, a map never replaces a non-image file,
an existing output needs --overwrite, impossible output paths are one line, and the hidden work files a
killed run left behind are cleaned at the next run over the same output (and only those)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest

from biotf.cli import main

FASTA = b">p1 Nucleus-S x\nMKVLAAGIVG\n>p2 Cytoplasm-U y\nMSTNPKPQRK\n>p3 Nucleus-M z\nMAAK\n"


@pytest.fixture
def fasta(tmp_path) -> Path:
    path = tmp_path / "in.fasta"
    path.write_bytes(FASTA)
    return path


def run_cli(capsys, *argv: str) -> tuple[int, str]:
    status = main(list(argv))
    return status, capsys.readouterr().err


def embed(capsys, model_dir: Path, source: Path, output: Path, *extra: str) -> tuple[int, str]:
    return run_cli(capsys, "embed", "--no-progress", "--model", str(model_dir), "--input", str(source),
                   "--output", str(output), *extra)


def one_line(status: int, err: str, *fragments: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# --- 1. a map never replaces a file that is not a PNG -------------------------------------------
@pytest.mark.parametrize("victim", ["input", "model", "embeddings_named_png"])
def test_embed_plot_never_replaces_a_non_image_file(capsys, tmp_path, model_dir, fasta, victim):
    target = {"input": fasta, "model": model_dir / "model.safetensors", "embeddings_named_png": tmp_path / "old.png"}[victim]
    if victim == "embeddings_named_png":
        target.write_bytes(b"PK\x03\x04 an npz someone renamed")
    before = target.read_bytes()
    status, err = embed(capsys, model_dir, fasta, tmp_path / "e.npz", "--plot", str(target), "--overwrite")
    one_line(status, err, str(target))
    assert target.read_bytes() == before
    assert not (tmp_path / "e.npz").exists()  # refused before any work


def test_plot_never_replaces_its_embeddings_or_a_non_image(capsys, tmp_path, model_dir, fasta):
    npz = tmp_path / "e.npz"
    assert embed(capsys, model_dir, fasta, npz)[0] == 0
    before = npz.read_bytes()
    for argv in (["--output", str(npz)], ["--output", str(npz), "--overwrite"]):
        status, err = run_cli(capsys, "plot", str(npz), *argv)
        one_line(status, err, str(npz))
        assert npz.read_bytes() == before
    notes = tmp_path / "notes.png"
    notes.write_text("my notes, not a picture\n")
    status, err = run_cli(capsys, "plot", str(npz), "--output", str(notes), "--overwrite")
    one_line(status, err, "not a PNG")
    assert notes.read_text() == "my notes, not a picture\n"
    # the same output twice in one command
    status, err = embed(capsys, model_dir, fasta, tmp_path / "f.npz", "--plot", str(tmp_path / "f.npz"))
    one_line(status, err, "f.npz")


def test_a_png_is_replaced_only_with_overwrite(capsys, tmp_path, model_dir, fasta):
    npz, png = tmp_path / "e.npz", tmp_path / "map.png"
    assert embed(capsys, model_dir, fasta, npz, "--plot", str(png))[0] == 0
    first = png.read_bytes()
    png.write_bytes(first + b"marker")  # still a PNG by its magic bytes
    status, err = run_cli(capsys, "plot", str(npz), "--output", str(png))
    one_line(status, err, "already exists", "--overwrite")
    assert png.read_bytes() == first + b"marker"
    status, err = run_cli(capsys, "plot", str(npz), "--output", str(png), "--overwrite")
    assert status == 0, err
    assert png.read_bytes() == first


# --- 2. an output is never the input, and replaces an existing file only with --overwrite ----------
def test_embed_refuses_to_write_over_its_own_input(capsys, tmp_path, model_dir):
    same = tmp_path / "same.npz"
    same.write_bytes(FASTA)
    for extra in ([], ["--overwrite"]):
        status, err = embed(capsys, model_dir, same, same, "--format", "fasta", *extra)
        one_line(status, err, "is the input")
        assert same.read_bytes() == FASTA
    link = tmp_path / "link.npz"
    link.symlink_to(same)
    status, err = embed(capsys, model_dir, same, link, "--format", "fasta", "--overwrite")
    one_line(status, err, "is the input")
    assert same.read_bytes() == FASTA


def test_existing_embeddings_need_overwrite(capsys, tmp_path, model_dir, fasta):
    out = tmp_path / "e.parquet"
    out.write_bytes(b"precious results of last week")
    status, err = embed(capsys, model_dir, fasta, out)
    one_line(status, err, "already exists", "--overwrite")
    assert out.read_bytes() == b"precious results of last week"
    status, err = embed(capsys, model_dir, fasta, out, "--overwrite")
    assert status == 0, err
    import pandas as pd

    assert pd.read_parquet(out)["id"].tolist() == ["p1", "p2", "p3"]


def test_a_failed_overwrite_keeps_the_old_file(capsys, tmp_path, model_dir):
    out = tmp_path / "e.npz"
    out.write_bytes(b"old")
    bad = tmp_path / "bad.fasta"
    bad.write_bytes(b">a\nMK1\n")
    status, err = embed(capsys, model_dir, bad, out, "--overwrite")
    one_line(status, err, "position 2")
    assert out.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.fasta", "e.npz"]


def test_compare_report_needs_overwrite(capsys, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("step,epoch,val/loss\n1,0,2.5\n2,0,2.25\n")
    report = tmp_path / "report.md"
    report.write_text("# my own report\n")
    status, err = run_cli(capsys, "compare", str(run), "--out", str(report))
    one_line(status, err, "already exists", "--overwrite")
    assert report.read_text() == "# my own report\n"
    status, err = run_cli(capsys, "compare", str(run), "--out", str(report), "--overwrite")
    assert status == 0, err
    assert report.read_text().startswith("# Comparison of 1 runs")


# --- 5. impossible output paths ----------------------------------------------------------------------
@pytest.mark.parametrize("where", ["parent_is_a_file", "output_is_a_directory"])
def test_impossible_output_path_is_one_line(capsys, tmp_path, model_dir, fasta, where):
    output = fasta / "o.npz" if where == "parent_is_a_file" else tmp_path / "dir.npz"
    if where == "output_is_a_directory":
        output.mkdir()
        (output / "keep").write_text("x")
    status, err = embed(capsys, model_dir, fasta, output, "--overwrite")
    one_line(status, err, str(output), "is a file" if where == "parent_is_a_file" else "directory")
    assert fasta.read_bytes() == FASTA
    if where == "output_is_a_directory":
        assert (output / "keep").read_text() == "x"


# --- 10. leftovers of a killed run ---------------------------------------------------------------------
def test_leftovers_of_a_killed_run_are_removed_and_reported(capsys, tmp_path, model_dir, fasta):
    from biotf.io.embeddings import EmbeddingWriter

    out = tmp_path / "e.npz"
    # what a SIGKILLed run leaves: a spool directory (written by the real writer, lock released) and a temporary
    killed = EmbeddingWriter(out, ["embeddings"], False, {})
    killed.text.write('["MK", {}]\n')
    killed.text.close()
    _, temporary = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=tmp_path)
    decoys = [".e.npz.bak", ".e.npz.abcdefgh.tmp.keep", "e.npz.abcdefgh.tmp", ".other.npz.abcdefgh.tmp",
              ".e.npz.abc.tmp", ".e.npz.abcdefgh.spool"]  # the last is a file, never what a writer makes
    for name in decoys:
        (tmp_path / name).write_text("not ours")
    # while a run over the same name is alive (it holds its spool's lock), nothing of that name is touched
    live = EmbeddingWriter(out, ["embeddings"], False, {})
    status, err = embed(capsys, model_dir, fasta, out)
    assert status == 0 and "removed" not in err, err
    assert killed.spool_dir.is_dir() and Path(temporary).is_file() and live.spool_dir.is_dir()
    live.abort()
    status, err = embed(capsys, model_dir, fasta, out, "--overwrite")
    assert status == 0, err
    assert "removed 2 leftover work file(s)" in err and killed.spool_dir.name in err and Path(temporary).name in err
    assert not killed.spool_dir.exists() and not Path(temporary).exists()
    for name in decoys:
        assert (tmp_path / name).read_text() == "not ours"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*decoys, "e.npz", "in.fasta"])
    assert np.load(out, allow_pickle=False)["embeddings"].shape == (3, 16)
