"""A write the system refuses (a full disk, a read-only file system, no permission) is one line naming the path and
the cause, exit status 2, and leaves no work file behind: embed's spools and temporaries, a checkpoint's temporary, a
token cache's build. A checkpoint write that fails halfway leaves last.ckpt as it was, and the resume continues from it.

Simulated, deterministically, in this process: a full disk is a file layer that raises ENOSPC once its room is spent
(`full_disk`, and torch writing a checkpoint into it: `torn_save`), or a writer that fails halfway; a read-only place (`read_only`) is a directory chmod 0o555 when the
tests run as a user (EACCES), and, as root, who ignores permissions, os.open / os.mkdir failing with EROFS inside it.
"""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from biotf.cli import main
from biotf.data import token_cache
from biotf.data.token_cache import tokenize_to_cache
from biotf.errors import DISK_CAUSES, DiskError, disk_error
from biotf.io import embeddings
from biotf.tokenizers import AminoAcidTokenizer
from biotf.entry import train as entry

FASTA = "".join(f">p{i} note{i % 3}\n{'MKVLAAGIVGSTNPKPQRK'[i % 7:]}\n" for i in range(12))
NO_SPACE = DISK_CAUSES[errno.ENOSPC][0]


def no_space() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class FillingDisk(io.RawIOBase):
    """A file on a disk with `room[0]` bytes left (shared by every file of the disk): a write past it fails with
    ENOSPC, as the kernel's does."""

    def __init__(self, path: str | Path, room: list[int]):
        self.file, self.room, self.name = open(path, "wb", buffering=0), room, os.fspath(path)

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.file.fileno()

    def write(self, data) -> int:
        if len(data) > self.room[0]:
            raise no_space()
        self.room[0] -= len(data)
        return self.file.write(data)

    def close(self) -> None:
        self.file.close()
        super().close()


def full_disk(monkeypatch: pytest.MonkeyPatch, module, room: int) -> None:
    """The files `module` opens for writing are on a disk with `room` bytes left; buffered as `open` buffers them,
    so a failure may come at a write, a flush or a close."""
    left = [room]

    def opener(file, mode="r", buffering=-1, encoding=None, errors=None, newline=None, **kwargs):
        if not set(mode) & set("wax+"):
            return open(file, mode, buffering, encoding, errors, newline, **kwargs)
        buffered = io.BufferedWriter(FillingDisk(file, left))
        return buffered if "b" in mode else io.TextIOWrapper(buffered, encoding=encoding, errors=errors,
                                                             newline=newline)

    monkeypatch.setattr(module, "open", opener, raising=False)


@pytest.fixture
def read_only(monkeypatch):
    """Make a directory unwritable; returns the cause the error must name. As a user: chmod 0o555 (EACCES). As root,
    whom permissions do not stop: os.open for writing and os.mkdir inside it fail with EROFS, as on a read-only
    file system (tempfile, Path.mkdir and every atomic write go through them)."""
    made: list[Path] = []

    def make(directory: Path) -> str:
        directory.mkdir(parents=True, exist_ok=True)
        made.append(directory)
        if os.geteuid() != 0:
            directory.chmod(0o555)
            return DISK_CAUSES[errno.EACCES][0]
        inside = str(directory.resolve())

        def refused(path) -> bool:
            return os.path.abspath(os.fspath(path)).startswith(inside)

        real_open, real_mkdir = os.open, os.mkdir

        def fake_open(path, flags, *args, **kwargs):
            if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT) and refused(path):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))
            return real_open(path, flags, *args, **kwargs)

        def fake_mkdir(path, *args, **kwargs):
            if refused(path):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))
            return real_mkdir(path, *args, **kwargs)

        monkeypatch.setattr(os, "open", fake_open)
        monkeypatch.setattr(os, "mkdir", fake_mkdir)
        return DISK_CAUSES[errno.EROFS][0]

    yield make
    for directory in made:
        directory.chmod(0o755)


def one_line(status: int, err: str, *fragments: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def embed(capsys, model_dir: Path, source: Path, output: Path) -> tuple[int, str]:
    status = main(["embed", "--no-progress", "--model", str(model_dir), "--input", str(source), "--output",
                   str(output)])
    return status, capsys.readouterr().err


# --- the translation itself -------------------------------------------------------------------------------
def test_disk_error_names_the_target_the_cause_and_another_refused_place(tmp_path):
    target = tmp_path / "out" / "e.npz"
    work = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / ".e.npz.abcd1234.tmp"))
    assert str(disk_error(work, target)) == f"cannot write {target}: {NO_SPACE} (free space there or write elsewhere)"
    parent = OSError(errno.EROFS, "Read-only file system", str(tmp_path / "out"))
    assert f"read-only file system at {tmp_path / 'out'}" in str(disk_error(parent, target))
    assert str(disk_error(OSError(errno.EACCES, "Permission denied", "/x/y"))).startswith("/x/y: permission denied")
    assert disk_error(OSError(errno.ENOENT, "No such file", "/x")) is None and disk_error(ValueError()) is None
    try:  # torch's zip writer, cleaning up after a full disk, raises over the OSError
        try:
            raise no_space()
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 768 vs 662")
    except RuntimeError as covered:
        assert str(disk_error(covered, target)).startswith(f"cannot write {target}: {NO_SPACE}")


def test_a_refused_write_no_writer_named_is_one_line_at_the_command_line(capsys, monkeypatch):
    from biotf.commands import tokenize

    def run(args):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), "/mnt/ro/file")

    monkeypatch.setattr(tokenize, "run", run)
    status = main(["tokenize", "--tokenizer", "protein", "--input", "x.fasta"])
    one_line(status, capsys.readouterr().err, "biotf tokenize: error: /mnt/ro/file: read-only file system")


# --- embed --------------------------------------------------------------------------------------------------
def fail_halfway(temporary: Path, writer) -> None:
    temporary.write_bytes(b"PK\x03\x04 half an archive")
    raise no_space()


@pytest.mark.parametrize("stage", ["spooling", "assembling"])
def test_embed_on_a_full_disk_is_one_line_leaves_no_spool_and_the_next_run_succeeds(capsys, tmp_path, model_dir,
                                                                                   stage):
    """Before: a traceback, and the hidden spool stayed (its last flush failed again while it was removed)."""
    source = tmp_path / "in.fasta"
    source.write_text(FASTA)
    output = tmp_path / "out" / "e.npz"
    with pytest.MonkeyPatch.context() as patch:
        if stage == "spooling":
            full_disk(patch, embeddings, room=100)  # the spools fill it
        else:
            patch.setitem(embeddings.WRITERS, ".npz", fail_halfway)  # the file being assembled fills it
        status, err = embed(capsys, model_dir, source, output)
    one_line(status, err, f"biotf embed: error: cannot write {output}: {NO_SPACE}")
    assert list(output.parent.iterdir()) == []  # no spool, no temporary
    status, err = embed(capsys, model_dir, source, output)
    assert status == 0 and "leftover" not in err, err
    assert [p.name for p in output.parent.iterdir()] == ["e.npz"] and len(np.load(output)["ids"]) == 12


@pytest.mark.parametrize("command", ["embed", "score", "predict", "plot", "search build"])
def test_every_output_into_a_read_only_directory_is_one_line(capsys, tmp_path, model_dir, classifier_dir, read_only,
                                                            command):
    source = tmp_path / "in.fasta"
    source.write_text(FASTA)
    embeddings = tmp_path / "e.npz"
    assert embed(capsys, model_dir, source, embeddings)[0] == 0
    locked = tmp_path / "locked"
    cause = read_only(locked)
    output = locked / {"embed": "e.npz", "score": "s.csv", "predict": "p.tsv", "plot": "map.png",
                       "search build": "index"}[command]
    model = ["--model", str(classifier_dir if command == "predict" else model_dir), "--input", str(source)]
    argv = {"embed": ["embed", "--no-progress", *model], "score": ["score", "--no-progress", *model],
            "predict": ["predict", *model], "plot": ["plot", str(embeddings)],
            "search build": ["search", "build", "--embeddings", str(embeddings)]}[command]
    status = main([*argv, "--output", str(output)])
    line = one_line(status, capsys.readouterr().err, f"biotf {command}: error: ", str(locked))
    assert cause in line.lower()  # the output's lock file (`claim_output`) is the first write, and says it so
    assert list(locked.iterdir()) == []


# --- the token cache ----------------------------------------------------------------------------------------
def test_a_token_cache_on_a_full_disk_is_one_error_leaving_no_work_files(tmp_path):
    source = tmp_path / "in.fasta"
    source.write_text(FASTA * 20)
    with pytest.MonkeyPatch.context() as patch:
        full_disk(patch, token_cache, room=200)
        with pytest.raises(DiskError, match=f"cannot write {tmp_path / 'cache'}/in.fasta-.*: {NO_SPACE}"):
            tokenize_to_cache(source, AminoAcidTokenizer(), tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []
    assert tokenize_to_cache(source, AminoAcidTokenizer(), tmp_path / "cache").status == "built"


# --- training -----------------------------------------------------------------------------------------------
STEPS = 8
TINY = ["model=tiny", "model.causal=false", "model.max_seq_len=64", "model.dropout=0.1", "data.max_length=64",
        "data.batch_size=8", f"trainer.max_steps={STEPS}", "trainer.val_check_interval=4",
        "trainer.limit_val_batches=1", "trainer.checkpoint_every_n_steps=2", "trainer.log_every_n_steps=1",
        "trainer.enable_progress_bar=false", "optim.warmup_steps=2"]


def write_proteins(path: Path, n: int = 40) -> Path:
    rng = np.random.default_rng(0)
    letters = np.array(list("ACDEFGHIKLMNPQRSTVWY"))
    path.write_text("".join(f">p{i}\n{''.join(rng.choice(letters, rng.integers(20, 60)))}\n" for i in range(n)))
    return path


def checkpoint(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def torn_save(monkeypatch: pytest.MonkeyPatch, name: str, at: int) -> None:
    """The `at`-th write of checkpoint `name` fills the disk halfway through: torch writes into a `FillingDisk` with
    room for half the checkpoint, and reports it as it does a real full disk ("unexpected pos" over the OSError)."""
    save, writes = torch.save, [0]

    def save_or_fill(obj, f, *args, **kwargs):
        if f".{name}." in os.path.basename(getattr(f, "name", os.fspath(f) if isinstance(f, (str, Path)) else "")):
            writes[0] += 1
            if writes[0] == at:
                buffer = io.BytesIO()
                save(obj, buffer, *args, **kwargs)
                return save(obj, io.BufferedWriter(FillingDisk(f.name, [buffer.tell() // 2])), *args, **kwargs)
        return save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save_or_fill)


def train_error(capsys, status: int) -> str:
    """The one error line of a training run (Lightning prints its own notes on stderr too)."""
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    assert status == 2 and len(errors) == 1 and "Traceback" not in err, err
    return errors[0]


@pytest.mark.slow  # three short trainings: the failed one, its resume, the uninterrupted reference
def test_a_full_disk_at_a_checkpoint_keeps_the_last_good_one_and_the_resume_continues_from_it(capsys, tmp_path):
    fasta = write_proteins(tmp_path / "proteins.fasta")
    common = [*TINY, f"data.path={fasta}", f"data.cache_dir={tmp_path / 'cache'}"]
    run_dir = tmp_path / "run"
    last = run_dir / "checkpoints" / "last.ckpt"
    with pytest.MonkeyPatch.context() as patch:
        torn_save(patch, "last.ckpt", at=2)  # step 4's save: last.ckpt holds step 2
        status = entry.main([*common, f"hydra.run.dir={run_dir}"])
    line = train_error(capsys, status)
    assert line == f"train: error: cannot write {last}: {NO_SPACE} (free space there or write elsewhere)"
    assert checkpoint(last)["global_step"] == 2
    assert [p.name for p in last.parent.iterdir()] == ["last.ckpt"]  # no torn temporary (best.ckpt: at step 4)
    assert not (run_dir / "summary.json").exists()

    assert entry.main([*common, f"ckpt_path={last}"]) == 0  # continues the run in its directory
    assert entry.main([*common, f"hydra.run.dir={tmp_path / 'uninterrupted'}"]) == 0
    resumed, reference = checkpoint(last), checkpoint(tmp_path / "uninterrupted" / "checkpoints" / "last.ckpt")
    assert resumed["global_step"] == reference["global_step"] == STEPS
    for name, value in reference["state_dict"].items():
        torch.testing.assert_close(resumed["state_dict"][name], value, rtol=1e-5, atol=1e-6, msg=name)


def test_a_full_disk_at_lightnings_best_checkpoint_is_one_line(capsys, tmp_path):
    fasta = write_proteins(tmp_path / "proteins.fasta")
    run_dir = tmp_path / "run"
    with pytest.MonkeyPatch.context() as patch:
        torn_save(patch, "best.ckpt", at=1)
        status = entry.main([*TINY, f"data.path={fasta}", f"data.cache_dir={tmp_path / 'cache'}",
                             f"hydra.run.dir={run_dir}"])
    best = run_dir / "checkpoints" / "best.ckpt"
    assert train_error(capsys, status).startswith(f"train: error: cannot write {best}: {NO_SPACE}")
    assert sorted(p.name for p in best.parent.iterdir()) == ["last.ckpt"]


def test_a_read_only_run_directory_is_one_line_before_training(capsys, tmp_path, read_only):
    fasta = write_proteins(tmp_path / "proteins.fasta")
    locked = tmp_path / "locked"
    cause = read_only(locked)
    status = entry.main([*TINY, f"data.path={fasta}", f"data.cache_dir={tmp_path / 'cache'}",
                         f"hydra.run.dir={locked / 'run'}"])
    fix = DISK_CAUSES[errno.EROFS if os.geteuid() == 0 else errno.EACCES][1]
    assert train_error(capsys, status).endswith(f": error: cannot write {locked / 'run'}: {cause} ({fix})")
    assert list(locked.iterdir()) == [] and not (tmp_path / "cache").exists()
