"""`biotf embed` / `biotf score` over several processes launched by torchrun (gloo on CPU): 2 processes on one node,
2 "nodes" simulated on this machine (two torchrun launches, MASTER_ADDR=127.0.0.1, NODE_RANK 0 and 1), and a resume
after a rank is killed by SIGTERM. Each output must be the one-process output byte for byte: batches of one window
(`--batch-tokens 1`) compute every vector alone, so equal floats are expected, not merely close ones."""

from __future__ import annotations

import json
import os
import subprocess
from itertools import islice
from pathlib import Path

import pytest

from biotf.cli import main
from biotf.io.readers import read_records
from biotf.data.sharded import work_folder
from biotf.conventions import SAMPLES_DIR
from tiny_models import save_tiny_protein_model
from torchrun_helpers import SEVERAL_PROCESSES, free_port
from torchrun_helpers import torchrun as torchrun_command

REPO = Path(__file__).resolve().parents[2]
RECORDS = 6  # three parts of two records: rank 0 gets parts 0 and 2, rank 1 part 1
# Run by torchrun instead of `-m biotf`: rank 1 is killed by SIGTERM right after finishing its first part (part 1),
# while rank 0 is still busy before its second (part 2), so torchrun stops it there.
KILLED_RANK = """
import os, signal, sys, time
from biotf.cli import main
from biotf.data import sharded

write_part = sharded._write_part

def write_then_die(work, folder, part, records):
    if part == 2:
        time.sleep(100)
    write_part(work, folder, part, records)
    if os.environ["RANK"] == "1":
        os.kill(os.getpid(), signal.SIGTERM)

sharded._write_part = write_then_die
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_protein_model(tmp_path_factory.mktemp("models") / "tiny", max_seq_len=64)


@pytest.fixture
def fasta(tmp_path) -> Path:
    """The first records of the shipped DeepLoc test set, cut to 150 residues (three windows of the tiny model)."""
    path = tmp_path / "in.fasta"
    records = islice(read_records(SAMPLES_DIR / "deeploc_test_set.fasta"), RECORDS)
    path.write_text("".join(f">{r.id} {r.metadata['description']}\n{r.sequence[:150]}\n" for r in records))
    return path


def environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                            "MASTER_PORT")}
    return {**env, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def torchrun(*launch: str, program: tuple[str, ...] = ("-m", "biotf"), args: tuple[str, ...] = ()) -> list[str]:
    return [*torchrun_command(*launch), *program, *args]


def launched(command: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, env=environment(), capture_output=True, text=True, timeout=120)


def single(capsys, *args: str) -> None:
    status = main([args[0], "--no-progress", *args[1:]])
    assert status == 0, capsys.readouterr().err


def embed_args(model_dir, fasta, out):
    return ("embed", "--no-progress", "--model", str(model_dir), "--input", str(fasta), "--output", str(out),
            "--batch-tokens", "1", "--part-records", "2")


@SEVERAL_PROCESSES
def test_two_processes_write_the_one_process_files(capsys, tmp_path, model_dir, fasta):
    single(capsys, "embed", "--model", str(model_dir), "--input", str(fasta), "--output", str(tmp_path / "one.h5ad"),
           "--batch-tokens", "1")
    result = launched(torchrun("--nproc-per-node", "2", "--master-port", str(free_port()),
                               args=embed_args(model_dir, fasta, tmp_path / "two.h5ad")), tmp_path)
    assert result.returncode == 0, result.stderr
    assert "3 parts: 0 kept from an earlier run, 3 done now by 2 ranks" in result.stderr
    assert result.stderr.count("6 records") == 1  # the summary, once, from rank 0
    assert (tmp_path / "two.h5ad").read_bytes() == (tmp_path / "one.h5ad").read_bytes()
    assert not work_folder(tmp_path / "two.h5ad").exists()


@SEVERAL_PROCESSES
def test_two_processes_score_into_the_one_process_table(capsys, tmp_path, model_dir, fasta):
    # a part's rows batch together as a one-process run's 256-record calls would only for parts of 256 records:
    # with parts of 2, batches of one row make the floats equal
    score = ("score", "--no-progress", "--model", str(model_dir), "--input", str(fasta), "--batch-tokens", "1")
    single(capsys, *score, "--output", str(tmp_path / "one.csv"))
    result = launched(torchrun("--nproc-per-node", "2", "--master-port", str(free_port()),
                               args=(*score, "--output", str(tmp_path / "two.csv"), "--part-records", "2")), tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "two.csv").read_bytes() == (tmp_path / "one.csv").read_bytes()


@SEVERAL_PROCESSES
def test_two_simulated_nodes_write_the_one_process_file(capsys, tmp_path, model_dir, fasta):
    single(capsys, "embed", "--model", str(model_dir), "--input", str(fasta), "--output", str(tmp_path / "one.npz"),
           "--batch-tokens", "1")
    port = str(free_port())
    nodes = [subprocess.Popen(torchrun("--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1",
                                       "--master-port", port, args=embed_args(model_dir, fasta, tmp_path / "two.npz")),
                              cwd=tmp_path, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
             for node in (0, 1)]
    outputs = [node.communicate(timeout=120) for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs
    assert "3 parts: 0 kept from an earlier run, 3 done now by 2 ranks" in outputs[0][1]
    assert "parts" not in outputs[1][1]  # node 1's rank reports nothing: rank 0 reports once
    assert (tmp_path / "two.npz").read_bytes() == (tmp_path / "one.npz").read_bytes()


@SEVERAL_PROCESSES
def test_a_rank_killed_by_sigterm_leaves_its_finished_part_and_the_rerun_does_only_the_rest(capsys, tmp_path,
                                                                                        model_dir, fasta):
    out = tmp_path / "e.npz"
    script = tmp_path / "killed_rank.py"
    script.write_text(KILLED_RANK)
    result = launched(torchrun("--nproc-per-node", "2", "--master-port", str(free_port()), program=(str(script),),
                               args=embed_args(model_dir, fasta, out)), tmp_path)
    assert result.returncode != 0 and not out.exists()
    folder = work_folder(out)
    # the manifest's entries: rank 1's part, finished before its SIGTERM, and rank 0's first part
    assert sorted(path.name for path in folder.glob("part-*.json")) == ["part-000000.json", "part-000001.json"]
    entry = json.loads((folder / "part-000001.json").read_text())
    assert entry["records"] == 2 and set(entry["files"]) >= {"embeddings", "state.json", "text.jsonl"}

    result = launched(torchrun("--nproc-per-node", "2", "--master-port", str(free_port()),
                               args=embed_args(model_dir, fasta, out)), tmp_path)
    assert result.returncode == 0, result.stderr
    assert "3 parts: 2 kept from an earlier run, 1 done now by 2 ranks" in result.stderr
    single(capsys, "embed", "--model", str(model_dir), "--input", str(fasta), "--output", str(tmp_path / "one.npz"),
           "--batch-tokens", "1")
    assert out.read_bytes() == (tmp_path / "one.npz").read_bytes()
