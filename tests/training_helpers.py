"""Constants and helpers shared by the training tests (imported as `training_helpers`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from hydra import compose, initialize_config_dir

from biotf.conventions import CONF_DIR
from biotf.training.train_config import TrainConfig, register_configs, validate

REPO = Path(__file__).resolve().parents[1]

# A tiny bidirectional model and a few short steps: seconds per run on 2 CPU cores.
TINY = [
    "model=tiny", "model.causal=false", "model.max_seq_len=64", "data.max_length=64", "data.batch_size=8",
    "trainer.max_steps=4", "trainer.val_check_interval=2", "trainer.limit_val_batches=2",
    "trainer.checkpoint_every_n_steps=2", "trainer.log_every_n_steps=1", "trainer.enable_progress_bar=false",
    "optim.warmup_steps=1",
]


# Subprocesses get one intra-op thread too (see conftest.one_torch_thread).
SUBPROCESS_ENV = {**os.environ, "OMP_NUM_THREADS": "1"}


def train_command(args: list[str]) -> list[str]:
    """`python train.py *args`, as a user runs it."""
    return [sys.executable, str(REPO / "train.py"), *args]


def start_script(args: list[str], cwd: Path) -> subprocess.Popen:
    """`python train.py *args` started in a fresh process, its output kept in temporary files (never a pipe that
    fills while another run is waited on). Runs that do not depend on each other start together: a 2-process run
    keeps one core busy for much of its time (rank 0 imports and reads its data before it launches rank 1, and
    scores and exports alone at the end), so on 2 cores two side by side take little more than one."""
    stdout, stderr = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    process = subprocess.Popen(train_command(args), cwd=cwd, stdout=stdout, stderr=stderr, text=True,
                               env=SUBPROCESS_ENV)
    process.output_files = stdout, stderr
    return process


def finish(process: subprocess.Popen, timeout: float = 300) -> subprocess.CompletedProcess:
    """Wait for a `start_script` process (killed past `timeout`): its exit status and output."""
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    output = []
    for handle in process.output_files:
        handle.seek(0)
        output.append(handle.read())
        handle.close()
    return subprocess.CompletedProcess(process.args, process.returncode, *output)


def stop_once_sharded(process: subprocess.Popen, checkpoint: Path) -> None:
    """SIGTERM a `start_script` training run as soon as its `checkpoint` is a sharded directory, and check that the
    run saved and stopped (exit status 143) leaving it sharded (the run did not end)."""
    from biotf.checkpoint.sharded_checkpoint import is_sharded

    deadline = time.monotonic() + 300
    while not is_sharded(checkpoint) and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    stopped = finish(process, timeout=120)
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert is_sharded(checkpoint)


def run_script(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python train.py *args` in a fresh process, waiting for it to finish."""
    return finish(start_script(args, cwd), timeout)


def write_proteins(path: Path, n: int = 60, seed: int = 0) -> Path:
    """Short random proteins: epochs of ~8 batches (TINY), so a few dozen steps cross epoch boundaries."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("ACDEFGHIKLMNPQRSTVWY"))
    path.write_text("".join(f">p{i}\n{''.join(rng.choice(letters, rng.integers(20, 90)))}\n" for i in range(n)))
    return path


def finetune_overrides(root: Path, *extra: str) -> list[str]:
    """A short fine-tuning run of the `pretrained` fixture's model on its labelled.csv (seconds on 2 cores)."""
    return ["experiment=finetune", f"init_from={root / 'base'}", f"data.path={root / 'labelled.csv'}",
            "data.id_column=id", f"data.cache_dir={root / 'cache'}", "data.max_length=64", "data.batch_size=16",
            "trainer.max_steps=60", "trainer.val_check_interval=10", "trainer.enable_progress_bar=false", "optim.lr=3e-3",
            "optim.warmup_steps=5", "finetune.trunk_lr=3e-3", *extra]


def finetune_config(root: Path, *extra: str) -> TrainConfig:
    register_configs()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return validate(compose(config_name="config", overrides=finetune_overrides(root, *extra)))
