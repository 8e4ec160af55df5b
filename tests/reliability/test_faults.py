"""Faults survived: SIGKILL at seeded random points of training (between steps and halfway through a
checkpoint write), each resumed from the last complete checkpoint, reaching the uninterrupted run's
weights; a non-finite loss stopping with the last good checkpoint kept, or skipped and counted; a
damaged token-cache shard rebuilt; an interrupted `biotf embed` leaving nothing under the final name.
"""

from __future__ import annotations

import io
import json
import os
import random
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from biotf.cli import main
from biotf.data.token_cache import tokenize_to_cache
from biotf.checkpoint import save_pretrained
from biotf.model import Transformer, TransformerConfig
from biotf.tokenizers import AminoAcidTokenizer
from biotf.entry import train as entry
from biotf.training.module import LanguageModelTask
from forked_process import Forked, run_forked

REPO = Path(__file__).resolve().parents[2]
STEPS = 12
TINY = ["model=tiny", "model.causal=false", "model.max_seq_len=64", "model.dropout=0.1", "data.max_length=64",
        "data.batch_size=8", f"trainer.max_steps={STEPS}", "trainer.val_check_interval=3",
        "trainer.limit_val_batches=2", "trainer.checkpoint_every_n_steps=2", "trainer.log_every_n_steps=1",
        "trainer.enable_progress_bar=false", "optim.warmup_steps=2"]

def killed_at(point: str, args: list[str]) -> int:
    """train.py's entry point, SIGKILLing its own process at `step:N` (as optimizer step N+1 begins) or at `write:N`
    (halfway through writing the N-th checkpoint file of this process, after flushing the bytes). Run in a forked
    process (`forked_process`): the patches stay in the child."""
    where, n = point.split(":")
    n = int(n)
    if where == "write":
        save, writes = torch.save, [0]

        def torn_save(obj, f, *args, **kwargs):
            writes[0] += 1
            if writes[0] == n:
                buffer = io.BytesIO()
                save(obj, buffer, *args, **kwargs)
                handle = f if hasattr(f, "write") else open(f, "wb")  # biotf saves checkpoints through an open file
                handle.write(buffer.getvalue()[: buffer.tell() // 2])
                handle.flush()
                os.fsync(handle.fileno())
                os.kill(os.getpid(), signal.SIGKILL)
            return save(obj, f, *args, **kwargs)
        torch.save = torn_save
    else:
        step = LanguageModelTask.training_step

        def training_step(self, batch, batch_idx):
            if self.global_step == n:
                os.kill(os.getpid(), signal.SIGKILL)
            return step(self, batch, batch_idx)
        LanguageModelTask.training_step = training_step
    return entry.main(args, script=str(REPO / "train.py"))


def write_proteins(path: Path, n: int = 60, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    letters = np.array(list("ACDEFGHIKLMNPQRSTVWY"))
    path.write_text("".join(f">p{i}\n{''.join(rng.choice(letters, rng.integers(20, 90)))}\n" for i in range(n)))
    return path


def checkpoint(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def assert_no_torn_checkpoint(run_dir: Path) -> None:
    """Every checkpoint under a final name loads whole; a torn write is only ever a hidden temporary."""
    for path in (run_dir / "checkpoints").glob("*"):
        if path.name.startswith("."):
            assert path.name.endswith(".tmp"), path
        else:
            assert "state_dict" in checkpoint(path), path


def kill_points(rng: random.Random, count: int) -> list[str]:
    """`count` kill points, alternating between steps (increasing) and checkpoint writes; all early enough
    that each resumed process still writes at least three checkpoints."""
    steps = sorted(rng.sample(range(2, STEPS - 3), count))
    return [f"step:{step}" if i % 2 == 0 else f"write:{rng.randint(1, 3)}" for i, step in enumerate(steps)]


@pytest.mark.slow
@pytest.mark.parametrize("points", [["step:3", "write:2"]] + [
    pytest.param(kill_points(random.Random(seed), 4), marks=pytest.mark.fuzz, id=f"fuzz-seed{seed}")
    for seed in range(5)])
def test_sigkill_then_resume_matches_uninterrupted(tmp_path, monkeypatch, points):
    """Each kill resumes from the newest complete last.ckpt; the final weights equal the uninterrupted run's."""
    fasta = write_proteins(tmp_path / "proteins.fasta")
    common = [*TINY, f"data.path={fasta}", f"data.cache_dir={tmp_path / 'cache'}"]
    monkeypatch.chdir(tmp_path)
    resume_from: Path | None = None
    for number, point in enumerate(points):
        run_dir = tmp_path / f"killed{number}"
        resume = [f"ckpt_path={resume_from}"] if resume_from else []
        process = run_forked(killed_at, point, [*common, *resume, f"hydra.run.dir={run_dir}"])
        assert process.returncode == -signal.SIGKILL, (point, process.stderr[-3000:])
        assert_no_torn_checkpoint(run_dir)
        assert not (run_dir / "summary.json").exists()
        last = run_dir / "checkpoints" / "last.ckpt"
        if last.exists():  # else the kill came before this run's first checkpoint: resume from the older one
            previous = checkpoint(resume_from)["global_step"] if resume_from else 0
            assert checkpoint(last)["global_step"] > previous, point
            resume_from = last
    assert resume_from is not None and checkpoint(resume_from)["global_step"] < STEPS

    assert entry.main([*common, f"ckpt_path={resume_from}", f"hydra.run.dir={tmp_path / 'resumed'}"]) == 0
    assert entry.main([*common, f"hydra.run.dir={tmp_path / 'uninterrupted'}"]) == 0
    resumed = checkpoint(tmp_path / "resumed" / "checkpoints" / "last.ckpt")
    reference = checkpoint(tmp_path / "uninterrupted" / "checkpoints" / "last.ckpt")
    assert resumed["global_step"] == reference["global_step"] == STEPS
    for name, value in reference["state_dict"].items():
        torch.testing.assert_close(resumed["state_dict"][name], value, rtol=1e-5, atol=1e-6, msg=name)


# --- non-finite loss -------------------------------------------------------------------------------
NAN_AT_CALL = 6  # the 6th training forward pass returns a NaN loss (optimizer step 6; checkpoints at 2, 4)


@pytest.fixture
def nan_once(monkeypatch):
    """Make one training batch's loss NaN, as an overflow would."""
    forward, calls = LanguageModelTask.forward, [0]

    def poisoned(self, *args, **kwargs):
        out = forward(self, *args, **kwargs)
        if self.training:
            calls[0] += 1
            if calls[0] == NAN_AT_CALL:
                out = out._replace(loss=out.loss * float("nan"))  # a HeadLoss
        return out

    monkeypatch.setattr(LanguageModelTask, "forward", poisoned)


def test_nonfinite_loss_stops_with_last_good_checkpoint(nan_once, capsys, tmp_path):
    fasta = write_proteins(tmp_path / "proteins.fasta")
    run_dir = tmp_path / "run"
    status = entry.main([*TINY, f"data.path={fasta}", f"data.cache_dir={tmp_path / 'cache'}",
                         f"hydra.run.dir={run_dir}"])
    err = capsys.readouterr().err
    assert status == 2 and "non-finite training loss nan at step 6" in err and "trainer.nonfinite=skip" in err, err
    last = checkpoint(run_dir / "checkpoints" / "last.ckpt")
    assert last["global_step"] == 4
    assert all(torch.isfinite(value).all() for value in last["state_dict"].values())
    assert not (run_dir / "summary.json").exists()


def test_nonfinite_loss_skipped_and_counted(nan_once, capsys, tmp_path):
    fasta = write_proteins(tmp_path / "proteins.fasta")
    run_dir = tmp_path / "run"
    assert entry.main([*TINY, "trainer.nonfinite=skip", f"data.path={fasta}", f"data.cache_dir={tmp_path / 'cache'}",
                       f"hydra.run.dir={run_dir}"]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["nonfinite_skipped"] == 1 and summary["steps"] == STEPS
    assert "1 batches skipped for a non-finite loss" in capsys.readouterr().out
    header, *rows = (run_dir / "metrics.csv").read_text().splitlines()
    column = header.split(",").index("train/nonfinite_skipped")
    assert {row.split(",")[column] for row in rows} - {""} == {"1.0"}
    last = checkpoint(run_dir / "checkpoints" / "last.ckpt")
    assert last["global_step"] == STEPS and last["biotf_nonfinite_skipped"] == 1
    assert all(torch.isfinite(value).all() for value in last["state_dict"].values())


# --- token cache -----------------------------------------------------------------------------------
def damage(path: Path, kind: str) -> None:
    data = path.read_bytes()
    if kind == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "bit_flip":  # same size: only the checksum can tell
        path.write_bytes(data[:-1] + bytes([data[-1] ^ 0x01]))
    elif kind == "extended":
        path.write_bytes(data + b"\x00" * 8)
    else:
        path.unlink()


CACHE_FILES = ["train.tokens.bin", "train.offsets.bin", "train.records.bin", "train.counts.bin",
               "validation.tokens.bin", "meta.json"]
DAMAGE = ["truncated", "empty", "bit_flip", "extended", "deleted"]


@pytest.mark.parametrize("kind", DAMAGE)
@pytest.mark.parametrize("file", CACHE_FILES)
def test_damaged_cache_shard_is_rebuilt_never_read(tmp_path, file, kind):
    fasta = write_proteins(tmp_path / "proteins.fasta", n=40)
    tokenizer = AminoAcidTokenizer()
    built = tokenize_to_cache(fasta, tokenizer, tmp_path / "cache", validation_fraction=0.2)
    expected = {name: split.tokens.copy() for name, split in built.splits.items()}
    damage(built.directory / file, kind)
    again = tokenize_to_cache(fasta, tokenizer, tmp_path / "cache", validation_fraction=0.2)
    assert again.status.startswith("rebuilt"), again.status
    for name, tokens in expected.items():
        np.testing.assert_array_equal(again.splits[name].tokens, tokens)
    assert tokenize_to_cache(fasta, tokenizer, tmp_path / "cache", validation_fraction=0.2).status == "reused"


# --- interrupted embed -----------------------------------------------------------------------------
RECORDS = 1500  # with --batch-tokens 128, vectors spool from ~2.2 s and the run ends at ~4 s: caught mid-run
@pytest.mark.parametrize("signal_number", [signal.SIGKILL, signal.SIGINT])
def test_interrupted_embed_leaves_nothing_then_rerun_completes(tmp_path, signal_number):
    torch.manual_seed(0)
    config = TransformerConfig(vocab_size=33, d_model=16, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=32,
                               max_seq_len=128, causal=False)
    model = save_pretrained(Transformer(config), AminoAcidTokenizer(), tmp_path / "model")
    fasta = write_proteins(tmp_path / "many.fasta", n=RECORDS)
    output = tmp_path / "out" / "embeddings.parquet"
    argv = ["embed", "--no-progress", "--model", str(model), "--input", str(fasta), "--output", str(output),
            "--batch-tokens", "128"]  # small blocks: vectors spool early
    # `biotf ARGV` in a forked process, SIGINT raising KeyboardInterrupt there as in a command started from a
    # terminal (whatever launched the tests: a shell starts background jobs with SIGINT ignored).
    process = Forked(main, argv)
    deadline = time.monotonic() + 120
    while process.poll() is None and time.monotonic() < deadline:  # wait until vectors are being spooled
        spools = list(output.parent.glob(".*.spool/*")) if output.parent.exists() else []
        if any(p.stat().st_size > 0 for p in spools):
            break
        time.sleep(0.02)
    assert process.poll() is None, "embed finished before it could be interrupted: give it more records"
    process.send_signal(signal_number)
    _, err = process.communicate(timeout=60)
    assert process.returncode == (-signal.SIGKILL if signal_number == signal.SIGKILL else 130), err
    assert not output.exists()
    leftovers = [p.name for p in output.parent.iterdir()]
    assert all(name.startswith(".") for name in leftovers), leftovers  # at most hidden spools (SIGKILL)
    if signal_number == signal.SIGINT:
        assert leftovers == [] and "interrupted" in err  # cleaned up on the way out
    assert main(argv) == 0  # the rerun, in this process
    import pandas as pd

    assert len(pd.read_parquet(output)) == RECORDS
