"""What a command says on stderr (progress lines, its summary) can never fail it nor land in its data
(`biotf.progress.messages_to_stderr`): with stderr closed (`2>&-`) the summary does not go to stdout, and a stderr
that refuses writes (a broken pipe, `/dev/full`) leaves a finished job's output written and its exit status 0.

These run a fresh interpreter: a stderr closed at start is what Python sees when it starts (`sys.stderr` is None)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from biotf.progress import messages_to_stderr

ROOT = Path(__file__).resolve().parents[2]
FASTA = "".join(f">p{i}\n{'MKVLAAGIVGSTNPKPQRK'[i % 7:]}\n" for i in range(40))


def biotf(argv: list[str], stderr, close_stderr: bool = False) -> subprocess.CompletedProcess:
    """`python -m biotf ARGV` with its progress lines due at every update (`BIOTF_PROGRESS_SECONDS=0`)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "BIOTF_PROGRESS_SECONDS": "0", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "biotf", *argv], stdout=subprocess.PIPE, stderr=stderr, env=env,
                          preexec_fn=(lambda: os.close(2)) if close_stderr else None, timeout=300)


@pytest.fixture
def fasta(tmp_path) -> Path:
    path = tmp_path / "in.fasta"
    path.write_text(FASTA)
    return path


def test_with_stderr_closed_the_summary_does_not_go_to_stdout(tmp_path, fasta):
    """Before, `biotf tokenize ... 2>&-` appended its summary to the token stream."""
    argv = ["tokenize", "--tokenizer", "protein", "--input", str(fasta)]
    shown = biotf(argv, subprocess.PIPE)
    assert shown.returncode == 0 and "40 records" in shown.stderr.decode(), shown.stderr
    closed = biotf(argv, None, close_stderr=True)
    assert closed.returncode == 0
    assert closed.stdout == shown.stdout and closed.stdout.decode().count("\n") == 40


def embed_argv(model_dir: Path, fasta: Path, output: Path) -> list[str]:
    return ["embed", "--model", str(model_dir), "--input", str(fasta), "--output", str(output)]


@pytest.mark.parametrize("refusing", ["broken_pipe", "dev_full"])
def test_a_stderr_that_refuses_writes_fails_nothing(tmp_path, model_dir, fasta, refusing):
    """Before, the first progress line raised BrokenPipeError / OSError(ENOSPC): exit 1, and no embeddings."""
    reference = tmp_path / "reference.npz"
    assert biotf(embed_argv(model_dir, fasta, reference), subprocess.DEVNULL).returncode == 0
    output = tmp_path / "e.npz"
    if refusing == "dev_full":
        if not Path("/dev/full").exists():
            pytest.skip("no /dev/full on this system")
        with open("/dev/full", "w") as full:
            done = biotf(embed_argv(model_dir, fasta, output), full)
    else:
        read_end, write_end = os.pipe()
        os.close(read_end)  # nobody reads: each write is EPIPE
        try:
            done = biotf(embed_argv(model_dir, fasta, output), write_end)
        finally:
            os.close(write_end)
    assert done.returncode == 0
    np.testing.assert_array_equal(np.load(output)["embeddings"], np.load(reference)["embeddings"])


class Refusing(io.StringIO):
    """A stream every write of which the system refuses."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def test_messages_to_stderr_gives_up_a_refusing_stream_and_restores_it(monkeypatch):
    refusing = Refusing()
    monkeypatch.setattr(sys, "stderr", refusing)
    with messages_to_stderr():
        print("a progress line", file=sys.stderr, flush=True)
        print("a summary", file=sys.stderr)
        assert sys.stderr.isatty() is False  # the stream's own attributes
    assert sys.stderr is refusing
