"""`search build` and `export-model` on a full disk, and a symbolic link that resolves to nothing as an output: one
line, exit status 2, nothing partial left.

The full disk is a real one where the tests may mount it (a 600 KiB tmpfs, as root): numpy's `tofile` reports it as
"N requested and M written" without the errno (so the index writes through Python, `biotf.io.atomic.save_array`),
and safetensors as its own `SafetensorError` ending in Rust's "(os error 28)" (`biotf.errors.RUST_OS_ERROR`).
Elsewhere the safetensors case runs on that exact error raised by a patched `save_file`.

The link policy (`biotf.io.outputs`): biotf never writes through a link. A link to an existing file is an existing
output (refused without --overwrite; with it the link is replaced, its target left as it is); a link whose target
is missing, or a loop of links, is refused; a new output directory must not be a link at all."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from biotf.cli import main

FASTA = "".join(f">p{i}\nMKVLAAGIVGSTNPKPQRK\n" for i in range(4))
NO_SPACE = os.strerror(errno.ENOSPC).lower()


def one_line(status: int, err: str, *fragments: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture
def small_disk(tmp_path):
    """A 600 KiB tmpfs mounted at tmp_path/disk (root only, where mounting is allowed); unmounted after."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(disk)],
                                           capture_output=True).returncode != 0:
        pytest.skip("mounting a small tmpfs needs root")
    yield disk
    subprocess.run(["umount", str(disk)], check=True)


def fill(disk: Path, leave: int) -> None:
    """Fill `disk` to `leave` bytes of room (a file of zeros)."""
    stats = os.statvfs(disk)
    (disk / "filler").write_bytes(bytes(max(stats.f_bavail * stats.f_frsize - leave, 0)))


@pytest.fixture
def embeddings(tmp_path) -> Path:
    """A 3,000 x 16 float32 embedding file (192 KB of vectors)."""
    from biotf.io.embeddings import EmbeddingWriter, RecordEmbedding
    from biotf.io.readers import Record

    vectors = np.random.default_rng(0).standard_normal((3000, 16)).astype(np.float32)
    info = {"tokenizer": "protein", "pool": "mean", "layers": [1], "dim": 16, "model_fingerprint": "m",
            "tokenizer_fingerprint": "t"}
    path = tmp_path / "e.npz"
    with EmbeddingWriter(path, ["embeddings"], False, info) as writer:
        for position, vector in enumerate(vectors):
            writer.add(RecordEmbedding(Record(f"r{position}", "ACDE", {}, position), vector[None]))
        writer.close()
    return path


@pytest.mark.parametrize("kind", ["exact", "approx"])
def test_search_build_on_a_full_disk_is_one_line_and_leaves_nothing(capsys, small_disk, embeddings, kind):
    if kind == "approx":
        pytest.importorskip("faiss")
    fill(small_disk, 100_000)
    status = main(["search", "build", "--embeddings", str(embeddings), "--output", str(small_disk / "index"),
                   "--index-type", kind, "--no-progress"])
    one_line(status, capsys.readouterr().err, f"cannot write {small_disk / 'index'}: {NO_SPACE}")
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]


def test_an_index_shard_written_to_a_full_disk_is_one_line(capsys, monkeypatch, tmp_path, embeddings):
    """Where no tmpfs can be mounted: the index's files on a disk with 100 KB of room (`full_disk`), written through
    Python's writes, which raise ENOSPC as the kernel's do."""
    from biotf.analysis.search import index
    from test_disk_faults import full_disk

    full_disk(monkeypatch, index, 100_000)
    status = main(["search", "build", "--embeddings", str(embeddings), "--output", str(tmp_path / "index"),
                   "--no-progress"])
    one_line(status, capsys.readouterr().err, f"cannot write {tmp_path / 'index'}: {NO_SPACE}")
    assert not [p for p in tmp_path.iterdir() if "index" in p.name]


@pytest.fixture
def wide_model(tmp_path) -> Path:
    """A biotf export of about 380 KB of weights."""
    import torch

    from biotf.checkpoint import save_pretrained
    from biotf.model import Transformer, TransformerConfig
    from biotf.tokenizers import AminoAcidTokenizer

    torch.manual_seed(0)
    config = TransformerConfig(vocab_size=33, d_model=96, n_layers=1, n_heads=2, d_ff=192, max_seq_len=64)
    return save_pretrained(Transformer(config), AminoAcidTokenizer(), tmp_path / "wide")


@pytest.mark.parametrize("hf", [[], ["--hf"]], ids=["biotf", "hf"])
def test_export_model_on_a_full_disk_is_one_line_and_leaves_nothing(capsys, small_disk, wide_model, hf):
    fill(small_disk, 100_000)
    status = main(["export-model", str(wide_model), str(small_disk / "exported"), *hf])
    one_line(status, capsys.readouterr().err, f"cannot write {small_disk / 'exported'}: {NO_SPACE}")
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]


def test_a_safetensors_error_of_a_full_disk_is_one_line(capsys, monkeypatch, tmp_path, wide_model):
    """safetensors' own words for ENOSPC, as it raised them on the tmpfs above."""
    import safetensors.torch

    def full(*args, **kwargs):
        raise safetensors.SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    status = main(["export-model", str(wide_model), str(tmp_path / "exported")])
    one_line(status, capsys.readouterr().err, f"cannot write {tmp_path / 'exported'}: {NO_SPACE}")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".exported")]


# --- symbolic links as outputs -------------------------------------------------------------------------
@pytest.fixture
def links(tmp_path) -> dict[str, Path]:
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere" / "target")
    loop_a, loop_b = tmp_path / "loop_a", tmp_path / "loop_b"
    loop_a.symlink_to(loop_b)
    loop_b.symlink_to(loop_a)
    return {"dangling": dangling, "loop": loop_a}


def output_commands(tmp_path: Path, model_dir: Path, output: Path) -> dict[str, list[str]]:
    fasta = tmp_path / "in.fasta"
    fasta.write_text(FASTA)
    return {"embed": ["embed", "--no-progress", "--model", str(model_dir), "--input", str(fasta), "--output",
                      str(output)],
            "export-model": ["export-model", str(model_dir), str(output)],
            "search build": ["search", "build", "--embeddings", str(tmp_path / "e.npz"), "--output", str(output)]}


@pytest.mark.parametrize("link", ["dangling", "loop"])
def test_a_link_that_resolves_to_nothing_is_refused_as_an_output(capsys, tmp_path, model_dir, embeddings, links,
                                                                 link):
    reason = "which does not exist" if link == "dangling" else "never resolves (a loop of links)"
    for name, argv in output_commands(tmp_path, model_dir, links[link]).items():
        one_line(main(argv), capsys.readouterr().err, str(links[link]), reason)
        assert links[link].is_symlink() and not (tmp_path / "nowhere").exists(), name
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(f".{links[link].name}.")], name


def test_a_link_to_a_file_is_an_existing_output_whose_target_is_never_written(capsys, tmp_path, model_dir):
    target = tmp_path / "precious.npz"
    target.write_bytes(b"last week's results")
    link = tmp_path / "link.npz"
    link.symlink_to(target)
    argv = output_commands(tmp_path, model_dir, link)["embed"]
    one_line(main(argv), capsys.readouterr().err, "already exists", "--overwrite")
    assert main([*argv, "--overwrite"]) == 0, capsys.readouterr().err
    assert not link.is_symlink() and np.load(link)["embeddings"].shape == (4, 16)
    assert target.read_bytes() == b"last week's results"


def test_a_new_output_directory_is_never_a_link(capsys, tmp_path, model_dir):
    empty = tmp_path / "empty"
    empty.mkdir()
    link = tmp_path / "to_empty"
    link.symlink_to(empty)
    one_line(main(["export-model", str(model_dir), str(link)]), capsys.readouterr().err, str(link),
             "is a symbolic link")
    assert link.is_symlink() and list(empty.iterdir()) == []
