"""Runs in parts (`biotf.data.sharded`), in this process: the environment of a one-rank torchrun launch takes the
sharded path of `biotf embed` / `score` / `predict`, so resume, refusals and counts are checked here in seconds;
tests/commands/test_sharded_launch.py runs the same over several processes with torchrun."""

from __future__ import annotations

import csv
import io
import json
import os

import numpy as np
import pytest
import torch

from biotf.cli import main
from biotf.data import sharded
from biotf.data.sharded import Launch, add_counts, work_folder
from biotf.io.embeddings import npz_text
from biotf.model import Transformer, TransformerConfig
from biotf.tokenizers import AminoAcidTokenizer
from tiny_models import save_tiny_protein_model

# Five records, one with lowercase letters (a counted tokenizer policy) and one repeating an id (a counted reader
# policy): the counts a sharded run reports must be the one-process ones.
FASTA = (">P1 Nucleus-S test\nMKVLAAGIVGlk\n>P2 Cytoplasm-U\nMSTNPKPQRKTKRNTNRRPQDVKFPGG\n>P3\nMA\n"
         ">P1 again\nMKKLLPTAAAGLLLLAAQPAMA\n>P5 Membrane\nGAVLIPFMWSTCYNQDEKRH\n")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_protein_model(tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture
def fasta(tmp_path):
    path = tmp_path / "in.fasta"
    path.write_text(FASTA)
    return path


@pytest.fixture
def one_rank(monkeypatch):
    """The environment torchrun gives a launch of one process."""
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(name, value)


def run(capsys, *args: str) -> tuple[int, str]:
    status = main([*args[:1], "--no-progress", *args[1:]] if args[0] != "predict" else list(args))
    return status, capsys.readouterr().err


def embed_args(model_dir, fasta, out, *extra):
    return ("embed", "--model", str(model_dir), "--input", str(fasta), "--output", str(out), *extra)


@pytest.mark.parametrize("suffix,pool", [(".npz", "none"), (".h5ad", "mean"), (".parquet", "none")])
def test_parts_merge_into_the_one_process_file_byte_for_byte(capsys, tmp_path, model_dir, fasta, monkeypatch,
                                                             suffix, pool):
    # batches of one window: each vector is computed alone, so the two runs' floats are equal to the bit
    single, parted = tmp_path / f"single{suffix}", tmp_path / f"parted{suffix}"
    options = ("--pool", pool, "--layer", "all", "--batch-tokens", "1")
    status, single_err = run(capsys, *embed_args(model_dir, fasta, single, *options))
    assert status == 0, single_err
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(name, value)
    status, err = run(capsys, *embed_args(model_dir, fasta, parted, *options, "--part-records", "2"))
    assert status == 0, err
    assert "3 parts: 0 kept from an earlier run, 3 done now by 1 rank" in err
    assert single.read_bytes() == parted.read_bytes()
    assert single_err.splitlines()[-1].split(": ", 1)[1] == err.splitlines()[-1].split(": ", 1)[1]  # the same counts
    assert "duplicate_ids=1" in err and "lowercase_folded=2" in err
    assert not work_folder(parted).exists()


def test_default_batches_agree_to_1e6_and_the_counts_are_the_one_process_ones(capsys, tmp_path, model_dir, fasta,
                                                                             one_rank, monkeypatch):
    parted, single = tmp_path / "parted.npz", tmp_path / "single.npz"
    status, err = run(capsys, *embed_args(model_dir, fasta, parted, "--part-records", "2"))
    assert status == 0, err
    monkeypatch.delenv("WORLD_SIZE")
    status, single_err = run(capsys, *embed_args(model_dir, fasta, single))
    assert status == 0, single_err
    a, b = np.load(single), np.load(parted)
    assert npz_text(a, "ids").tolist() == npz_text(b, "ids").tolist() == ["P1", "P2", "P3", "P1", "P5"]
    assert str(a["info"]) == str(b["info"])
    np.testing.assert_allclose(b["embeddings"], a["embeddings"], rtol=0, atol=1e-6)
    assert single_err.splitlines()[-1].split(": ", 1)[1] == err.splitlines()[-1].split(": ", 1)[1]


def test_score_in_parts_is_the_one_process_table(capsys, tmp_path, model_dir, fasta, one_rank, monkeypatch):
    status, err = run(capsys, "score", "--model", str(model_dir), "--input", str(fasta), "--output",
                      str(tmp_path / "parted.csv"), "--part-records", "2")
    assert status == 0, err
    monkeypatch.delenv("WORLD_SIZE")
    status, single_err = run(capsys, "score", "--model", str(model_dir), "--input", str(fasta), "--output",
                             str(tmp_path / "single.csv"))
    assert status == 0, single_err
    assert (tmp_path / "parted.csv").read_bytes() == (tmp_path / "single.csv").read_bytes()
    assert single_err.splitlines()[-1].split(": ", 1)[1] == err.splitlines()[-1].split(": ", 1)[1]


class Crash(Exception):
    pass


def test_a_crash_keeps_finished_parts_and_the_rerun_does_only_the_rest(capsys, tmp_path, model_dir, fasta,
                                                                      one_rank, monkeypatch):
    out = tmp_path / "e.npz"
    write_part = sharded._write_part

    def crash_at_part_two(work, folder, part, records):
        if part == 2:
            (folder / "part-000002.tmp").mkdir()  # what a part in progress leaves when its rank is killed
            (folder / "part-000002.tmp" / "embeddings").write_bytes(b"half")
            raise Crash
        write_part(work, folder, part, records)

    monkeypatch.setattr(sharded, "_write_part", crash_at_part_two)
    with pytest.raises(Crash):
        run(capsys, *embed_args(model_dir, fasta, out, "--part-records", "2", "--batch-tokens", "1"))
    folder = work_folder(out)
    assert sorted(p.name for p in folder.iterdir()) == [
        "manifest.json", "part-000000", "part-000000.json", "part-000001", "part-000001.json", "part-000002.tmp",
        "run.lock"]
    entries = {name: os.stat(folder / name).st_mtime_ns for name in ("part-000000.json", "part-000001.json")}
    done = []

    def record_and_write(work, folder, part, records):
        done.append(part)
        write_part(work, folder, part, records)

    monkeypatch.setattr(sharded, "_write_part", record_and_write)
    # the kept parts are not rewritten: their entries are those of the first run when the merge reads them
    read = sharded.parse_json_object

    def entry_of_the_first_run(text, source, what, **options):
        if source.endswith(("part-000000.json", "part-000001.json")):
            assert os.stat(source).st_mtime_ns == entries[os.path.basename(source)]
        return read(text, source, what, **options)

    monkeypatch.setattr(sharded, "parse_json_object", entry_of_the_first_run)
    status, err = run(capsys, *embed_args(model_dir, fasta, out, "--part-records", "2", "--batch-tokens", "1"))
    assert status == 0, err
    assert done == [2] and "3 parts: 2 kept from an earlier run, 1 done now by 1 rank" in err
    monkeypatch.delenv("WORLD_SIZE")
    status, _ = run(capsys, *embed_args(model_dir, fasta, tmp_path / "single.npz", "--batch-tokens", "1"))
    assert status == 0 and out.read_bytes() == (tmp_path / "single.npz").read_bytes()


def interrupted(capsys, model_dir, fasta, out, monkeypatch, *extra):
    """An embedding run stopped after its first part (what a killed run leaves)."""
    stopped_after_first_part(capsys, monkeypatch, *embed_args(model_dir, fasta, out, "--part-records", "2", *extra))


def stopped_after_first_part(capsys, monkeypatch, *args):
    """Run the command of `args`, stopped after its first part."""
    write_part = sharded._write_part

    def stop_after_first(work, folder, part, records):
        if part > 0:
            raise Crash
        write_part(work, folder, part, records)

    with monkeypatch.context() as patch:
        patch.setattr(sharded, "_write_part", stop_after_first)
        with pytest.raises(Crash):
            run(capsys, *args)


def test_a_changed_input_model_or_setting_refuses_to_resume_naming_it(capsys, tmp_path, model_dir, fasta, one_rank,
                                                                     monkeypatch):
    out = tmp_path / "e.npz"
    interrupted(capsys, model_dir, fasta, out, monkeypatch)
    manifest = (work_folder(out) / "manifest.json").read_text()
    fasta.write_text(FASTA.replace("MA\n", "MAA\n"))
    status, err = run(capsys, *embed_args(model_dir, fasta, out, "--part-records", "2"))
    assert status == 2 and len(err.strip().splitlines()) == 1
    assert f"holds parts of another run: the input (now {fasta.stat().st_size} bytes" in err and "--overwrite" in err
    fasta.write_text(FASTA)
    other = save_tiny_protein_model(tmp_path / "other", causal=True)
    status, err = run(capsys, *embed_args(other, fasta, out, "--part-records", "2"))
    assert status == 2 and "model_fingerprint (" in err
    status, err = run(capsys, *embed_args(model_dir, fasta, out, "--part-records", "2", "--pool", "max"))
    assert status == 2 and "pool ('mean' -> 'max')" in err
    status, err = run(capsys, *embed_args(model_dir, fasta, out, "--part-records", "3"))
    assert status == 2 and "part_records (2 -> 3)" in err
    assert (work_folder(out) / "manifest.json").read_text() == manifest  # refusals change nothing
    assert not out.exists()
    status, err = run(capsys, *embed_args(model_dir, fasta, out, "--part-records", "3", "--overwrite"))
    assert status == 0 and "2 parts: 0 kept from an earlier run, 2 done now" in err


@pytest.mark.parametrize("command,suffix", [("embed", ".npz"), ("score", ".csv"), ("predict", ".tsv")])
def test_outputs_record_the_precision_and_a_resume_under_another_is_refused_naming_it(
        capsys, tmp_path, model_dir, fasta, one_rank, monkeypatch, command, suffix):
    """Before: nothing recorded it, and the refusal said only that the model's fingerprint changed."""
    model = task_model(tmp_path / "task") if command == "predict" else model_dir
    out = tmp_path / f"out{suffix}"
    args = (command, "--model", str(model), "--input", str(fasta), "--output", str(out), "--part-records", "2")
    stopped_after_first_part(capsys, monkeypatch, *args)
    manifest = (work_folder(out) / "manifest.json").read_bytes()
    assert '"precision": "fp32"' in manifest.decode()
    status, err = run(capsys, *args, "--precision", "bf16")
    assert status == 2 and len(err.strip().splitlines()) == 1, err
    # (bf16's way of computing, where it says more than its name, is named after it: precision_scheme)
    assert "holds parts of another run: precision ('fp32' -> 'bf16')" in err and "fingerprint" not in err, err
    assert (work_folder(out) / "manifest.json").read_bytes() == manifest
    if command == "embed":
        other = tmp_path / "bf16.npz"
        status, err = run(capsys, *embed_args(model, fasta, other, "--precision", "bf16"))
        assert status == 0, err
        assert json.loads(str(np.load(other)["info"]))["precision"] == "bf16"
    if command == "score":  # a score table records it on every row, beside the method
        for precision in ("fp32", "bf16"):
            table = tmp_path / f"{precision}.csv"
            status, err = run(capsys, "score", "--model", str(model), "--input", str(fasta), "--output", str(table),
                              "--precision", precision)
            assert status == 0, err
            with open(table, newline="") as handle:
                rows = list(csv.DictReader(handle))
            assert rows and {row["precision"] for row in rows} == {precision}


@pytest.mark.parametrize("command,suffix", [("embed", ".npz"), ("score", ".csv"), ("predict", ".tsv")])
def test_a_changed_packing_setting_refuses_to_resume(capsys, tmp_path, model_dir, fasta, one_rank, monkeypatch,
                                                     command, suffix):
    model = task_model(tmp_path / "task") if command == "predict" else model_dir
    args = (command, "--model", str(model), "--input", str(fasta), "--output", str(tmp_path / f"out{suffix}"),
            "--part-records", "2")
    stopped_after_first_part(capsys, monkeypatch, *args, "--packing")
    status, err = run(capsys, *args)
    assert status == 2 and len(err.strip().splitlines()) == 1 and "packing (True -> False) changed" in err, err
    status, err = run(capsys, *args, "--packing")
    assert status == 0 and "3 parts: 1 kept from an earlier run, 2 done now" in err, err


def test_a_damaged_part_is_redone_and_said(capsys, tmp_path, model_dir, fasta, one_rank, monkeypatch):
    out = tmp_path / "e.npz"
    interrupted(capsys, model_dir, fasta, out, monkeypatch, "--batch-tokens", "1")
    vectors = work_folder(out) / "part-000000" / "embeddings"
    damaged = bytearray(vectors.read_bytes())
    damaged[10] ^= 0xFF
    vectors.write_bytes(bytes(damaged))
    status, err = run(capsys, *embed_args(model_dir, fasta, out, "--part-records", "2", "--batch-tokens", "1"))
    assert status == 0 and "0 kept from an earlier run, 1 damaged or unfinished redone, 3 done now" in err
    monkeypatch.delenv("WORLD_SIZE")
    status, _ = run(capsys, *embed_args(model_dir, fasta, tmp_path / "single.npz", "--batch-tokens", "1"))
    assert out.read_bytes() == (tmp_path / "single.npz").read_bytes()


def test_a_folder_biotf_did_not_write_is_never_touched(capsys, tmp_path, model_dir, fasta, one_rank):
    out = tmp_path / "e.npz"
    work_folder(out).mkdir()
    (work_folder(out) / "notes.txt").write_text("mine")
    status, err = run(capsys, *embed_args(model_dir, fasta, out, "--overwrite"))
    assert status == 2 and "is not a parts folder of biotf" in err and "never deletes" in err
    assert (work_folder(out) / "notes.txt").read_text() == "mine" and not out.exists()


def test_a_plain_run_says_parts_wait_to_be_resumed(capsys, tmp_path, model_dir, fasta, one_rank, monkeypatch):
    out = tmp_path / "e.npz"
    interrupted(capsys, model_dir, fasta, out, monkeypatch)
    monkeypatch.delenv("WORLD_SIZE")
    status, err = run(capsys, *embed_args(model_dir, fasta, out))
    assert status == 0 and "holds parts of an interrupted run under torchrun" in err
    assert (work_folder(out) / "part-000000.json").is_file()


def test_score_variants_under_torchrun_is_refused_in_one_line(capsys, tmp_path, model_dir, one_rank):
    (tmp_path / "v.csv").write_text("mutant\nM1A\n")
    status, err = run(capsys, "score", "--model", str(model_dir), "--variants", str(tmp_path / "v.csv"),
                      "--reference", "MKV", "--output", str(tmp_path / "s.csv"))
    assert status == 2 and "invalid --variants" in err and "allowed: --input" in err


def test_the_launch_environment(monkeypatch):
    assert Launch.from_environment({}) is None
    assert Launch.from_environment({"WORLD_SIZE": "1"}) == Launch(0, 1, 0)
    launch = Launch.from_environment({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "node1",
                                      "MASTER_PORT": "29500"})
    assert launch == Launch(3, 4, 1) and launch.device("cuda") == "cuda:1" and launch.device("cpu") == "cpu"
    with pytest.raises(Exception, match="RANK"):
        Launch.from_environment({"RANK": "4", "WORLD_SIZE": "4", "MASTER_ADDR": "a", "MASTER_PORT": "1"})
    with pytest.raises(Exception, match="MASTER_ADDR=None: a run over several processes needs it"):
        Launch.from_environment({"RANK": "0", "WORLD_SIZE": "2"})
    assert add_counts({"records": 2, "policies": {"a": 1}}, {"records": 3, "policies": {"a": 1, "b": 2}}) == {
        "records": 5, "policies": {"a": 2, "b": 2}}


def task_model(directory):
    from biotf.checkpoint.task_model import TaskInfo, save_task_model
    from biotf.model.heads import TaskModel

    torch.manual_seed(0)
    trunk = Transformer(TransformerConfig(vocab_size=33, d_model=16, n_layers=1, n_heads=2, d_ff=32, max_seq_len=64,
                                          causal=False))
    return save_task_model(TaskModel(trunk, "classification", 2, pool="mean"), AminoAcidTokenizer(),
                           TaskInfo("classification", ["no", "yes"], "mean", 16, "crop"), directory)


def test_predict_in_parts_is_the_one_process_table(capsys, tmp_path, fasta, one_rank, monkeypatch):
    directory = task_model(tmp_path / "task")
    args = ("predict", "--model", str(directory), "--input", str(fasta), "--batch-size", "1")
    status, err = run(capsys, *args, "--output", str(tmp_path / "parted.tsv"), "--part-records", "2")
    assert status == 0, err
    monkeypatch.delenv("WORLD_SIZE")
    status, single_err = run(capsys, *args, "--output", str(tmp_path / "single.tsv"))
    assert status == 0, single_err
    assert (tmp_path / "parted.tsv").read_bytes() == (tmp_path / "single.tsv").read_bytes()
    assert single_err.splitlines()[-1] == err.splitlines()[-1] and "3 longer than max_length" in err


def test_score_parts_of_256_records_batch_as_one_process_does(capsys, tmp_path, model_dir, monkeypatch):
    # parts of a multiple of the scorer's 256 records per call hold the same calls, so even default batches give
    # the one-process floats to the bit; parts of 100 records batch otherwise, so their floats equal the one-process
    # ones within 1e-5 only (to the bit on some CPUs, not on others: summation order follows the batch)
    rng = np.random.default_rng(0)
    letters = np.array(list("ACDEFGHIKLMNPQRSTVWY"))
    fasta = tmp_path / "many.fasta"
    fasta.write_text("".join(f">r{i}\n{''.join(rng.choice(letters, rng.integers(3, 12)))}\n" for i in range(300)))
    args = ("score", "--model", str(model_dir), "--input", str(fasta))
    status, err = run(capsys, *args, "--output", str(tmp_path / "single.csv"))
    assert status == 0, err
    single = (tmp_path / "single.csv").read_bytes()
    for part_records in ("256", "100"):
        monkeypatch.setenv("WORLD_SIZE", "1")
        out = tmp_path / f"{part_records}.csv"
        status, err = run(capsys, *args, "--output", str(out), "--part-records", part_records)
        assert status == 0, err
        if part_records == "256":
            assert out.read_bytes() == single
        else:
            assert_rows_close(out.read_text(), single.decode())


def assert_rows_close(table: str, reference: str) -> None:
    """The same rows and text cells as `reference`, and every numeric cell within 1e-5 (relative) of its value."""
    rows, reference_rows = (list(csv.reader(io.StringIO(text))) for text in (table, reference))
    assert len(rows) == len(reference_rows) and rows[0] == reference_rows[0]
    for row, reference_row in zip(rows[1:], reference_rows[1:]):
        for cell, reference_cell in zip(row, reference_row, strict=True):
            try:
                assert float(cell) == pytest.approx(float(reference_cell), rel=1e-5, abs=1e-6), (row, reference_row)
            except ValueError:
                assert cell == reference_cell
