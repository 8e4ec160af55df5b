"""The run directory: one run owns it, a resume continues it, and nothing in it is overwritten by another run.

Layout: config.yaml (resolved config), tokenizer.json, metrics.csv (or tensorboard/), checkpoints/
{last,best}.ckpt, summary.json / summary.txt, and run.lock while a process trains in it. The rules:
- a run directory holds one run: training into a directory that already holds one (config.yaml,
  metrics.csv, checkpoints/ ...) is refused unless the run resumes a checkpoint of that directory;
- one process at a time: `run.lock` records the training process's pid and host; a second run is
  refused while that process lives, and a lock left by a dead process (SIGKILL, power loss) is taken over;
- a resume continues the directory: metrics.csv keeps the rows up to the resumed step (the rows after it are
  logged again, identically, by the exact resume; `trim_metrics`) and gains the new ones (`metrics_log`);
- a resume trains what its run trained: settings that differ from the config.yaml of the checkpoint's run are
  refused, naming them, except those in `RESUMABLE` (`check_resume`); a finished fine-tuning run (model/) is not
  resumed over its export.
- a run refused inside its job (a changed split, a checkpoint that does not fit) leaves the directory as it was,
  Hydra's .hydra/ included: into a directory that exists, Hydra writes its files to `PENDING_HYDRA_DIR`, moved into
  .hydra/ once the run is accepted (`adopt_hydra_files`) and removed when it is refused (`discard_hydra_files`).
Only rank 0 of a distributed launch claims the directory; the other ranks write nothing into it.
No Lightning here: `entry.preflight` checks the directory and the resume before Hydra writes into it (.hydra/).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from biotf.io.tables import write_rows
from biotf.checkpoint import CHECKPOINT_DIR, FINETUNED_MODEL_DIR
from biotf.errors import BiotfError, InputError, disk_errors
from biotf.training.hints import command_line, hydra_override

if TYPE_CHECKING:
    from biotf.training.train_config import TrainConfig

RESOLVED_CONFIG = "config.yaml"
HYDRA_DIR = ".hydra"  # Hydra's record of the job (config.yaml, overrides.yaml, hydra.yaml): hydra.output_subdir
PENDING_HYDRA_DIR = ".hydra.pending"  # where Hydra writes it in a directory that exists, until the run is accepted
METRICS_FILE = "metrics.csv"
LOCK_FILE = "run.lock"
# Files whose presence means a run already used the directory (Hydra's own .hydra/ does not count).
RUN_FILES = (RESOLVED_CONFIG, METRICS_FILE, CHECKPOINT_DIR, "summary.json", "tensorboard")
# What a resume may change: how long it trains, how often it saves and logs, on what hardware (device count,
# accelerator, strategy), and what only costs memory or time (gradient checkpointing, the token cache's place,
# loader workers). Everything else (model, tokenizer, data, optimizer, task, finetune.*, seed, precision,
# validation cadence) changes what is trained or which checkpoint is best, and must equal the run's config.yaml.
RESUMABLE = frozenset({
    "ckpt_path", "trainer.max_steps", "trainer.checkpoint_every_n_steps", "trainer.checkpoint_every_minutes",
    "trainer.log_every_n_steps", "trainer.enable_progress_bar", "trainer.progress", "trainer.accelerator",
    "trainer.devices", "trainer.num_nodes", "trainer.strategy", "trainer.gradient_checkpointing", "data.cache_dir", "data.num_workers"})
# A fine-tuning run's config.yaml holds init_from's model and tokenizer, not the composed groups: init_from is compared.
FROM_INIT_FROM = ("model.", "tokenizer.")


class RunDirectoryError(BiotfError):
    """A run directory that is in use by another process, or holds another run."""


def is_launch_rank_zero() -> bool:
    """Rank 0 of a distributed launch, from the variables Lightning's DDP workers, torchrun and Slurm set."""
    return all(os.environ.get(name, "0") == "0" for name in ("RANK", "LOCAL_RANK", "SLURM_PROCID"))


def checkpoint_run_dir(ckpt_path: str | Path) -> Path | None:
    """The run directory a checkpoint belongs to (`<run>/checkpoints/<name>.ckpt`), None for a loose file."""
    path = Path(ckpt_path).resolve()
    return path.parent.parent if path.parent.name == CHECKPOINT_DIR else None


def flatten(mapping: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"model": {"pos": "rope"}} -> {"model.pos": "rope"}; lists become tuples (hashable)."""
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = tuple(value) if isinstance(value, list) else value
    return flat


def changed_settings(stored: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """The dotted keys whose values differ between two flattened configs, sorted. Keys only one of them has are not
    compared: a field added to the schema since a run was written does not void it."""
    return sorted(key for key in stored.keys() & wanted.keys() if stored[key] != wanted[key])


def read_run_config(path: Path) -> dict[str, Any]:
    """A run's config.yaml, flattened; a damaged one is one line naming it."""
    try:
        values = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as error:
        raise InputError(f"{path}: damaged run config ({str(error).splitlines()[0]})") from None
    if not isinstance(values, dict):
        raise InputError(f"{path}: damaged run config (not a mapping of settings)")
    return flatten(values)


def check_resume(config: TrainConfig) -> None:
    """Refuse a resume whose settings differ from those of the run its checkpoint belongs to (`RESUMABLE` aside),
    naming each key with both values. Reads only: called before anything is written (Hydra's .hydra/ included)."""
    from biotf.training.train_config import to_plain  # Hydra's schema: not for `biotf compare`, which reads run configs

    origin = checkpoint_run_dir(config.ckpt_path) if config.ckpt_path is not None else None
    if origin is None or not (origin / RESOLVED_CONFIG).is_file():
        return  # a loose checkpoint file, or a run stopped before it wrote its config
    stored = read_run_config(origin / RESOLVED_CONFIG)
    wanted = flatten(to_plain(config))
    changed = [key for key in changed_settings(stored, wanted) if key not in RESUMABLE
               and not (config.task is not None and key.startswith(FROM_INIT_FROM))]
    if changed:
        differences = ", ".join(f"{key} ({stored[key]!r} -> {wanted[key]!r})" for key in changed)
        raise RunDirectoryError(f"resuming {config.ckpt_path} with settings that differ from its run's "
                                f"{origin / RESOLVED_CONFIG}: {differences}; resume with the run's settings (a resume "
                                f"may change only {', '.join(sorted(RESUMABLE - {'ckpt_path'}))}) or start a new run")


def _lock_owner(run_dir: Path) -> dict | None:
    """The live process that holds the directory's lock, or None when there is no lock or its process died."""
    try:
        owner = json.loads((run_dir / LOCK_FILE).read_text(encoding="utf-8"))
        pid, host = int(owner["pid"]), str(owner["host"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError):  # a torn lock file: its writer died mid-write
        return None
    if host != socket.gethostname():
        return owner  # another machine's process: cannot be checked from here, so assumed alive
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # alive, another user's
        pass
    return owner


def check_run_dir(run_dir: str | Path, ckpt_path: str | Path | None) -> None:
    """Refuse a run directory that another process trains in, or that holds a run this one does not resume, and a
    resume into another directory of a checkpoint whose own run directory another process trains in."""
    run_dir = Path(run_dir)
    owner = _lock_owner(run_dir)
    if owner is not None and not (owner.get("pid") == os.getpid() and owner.get("host") == socket.gethostname()):
        raise RunDirectoryError(f"run directory {run_dir} is in use by process {owner['pid']} on {owner['host']} "
                                f"(lock file {run_dir / LOCK_FILE}; delete it if that process is gone); "
                                "choose another hydra.run.dir")
    used = [name for name in RUN_FILES if (run_dir / name).exists()]
    origin = checkpoint_run_dir(ckpt_path) if ckpt_path is not None else None
    resumes_it = origin == run_dir.resolve()
    training_origin = _lock_owner(origin) if origin is not None and not resumes_it else None
    if training_origin is not None:
        raise RunDirectoryError(f"{ckpt_path} belongs to run directory {origin}, which process {training_origin['pid']} "
                                f"on {training_origin['host']} is training in (it rewrites that checkpoint as it "
                                "goes); resume from it once that run has stopped")
    if resumes_it and (run_dir / FINETUNED_MODEL_DIR).exists():
        raise RunDirectoryError(f"run directory {run_dir} already holds a finished fine-tuning run "
                                f"({FINETUNED_MODEL_DIR}/); choose a new hydra.run.dir")
    if used and not resumes_it:
        last = run_dir / CHECKPOINT_DIR / "last.ckpt"
        raise RunDirectoryError(f"run directory {run_dir} already holds a run ({', '.join(used)}); resume it with "
                                f"{command_line(hydra_override('ckpt_path', last))} or choose a new hydra.run.dir")


def check_writable(run_dir: str | Path) -> None:
    """Refuse a run directory that cannot be written (a read-only file system, no permission, a full disk) in one
    line, before Hydra creates it: a small probe file is written and removed in it, or in the nearest existing
    directory above it, where it would be created."""
    run_dir = Path(run_dir)
    where = next((path for path in (run_dir, *run_dir.parents) if path.is_dir()), Path("."))
    with disk_errors(run_dir), tempfile.TemporaryFile(dir=where) as probe:
        probe.write(bytes(4096))  # a block: a full disk refuses it, an empty file it would not
        probe.flush()


@contextmanager
def claim_run_dir(run_dir: str | Path, ckpt_path: str | Path | None) -> Iterator[None]:
    """Hold `run_dir` for this process (rank 0) while the block runs: checked, then locked, then released."""
    run_dir = Path(run_dir)
    if not is_launch_rank_zero():
        yield
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = run_dir / LOCK_FILE
    stale = lock.exists() and _lock_owner(run_dir) is None
    check_run_dir(run_dir, ckpt_path)
    if stale:  # left by a process that is gone
        lock.unlink(missing_ok=True)
    try:
        handle = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:  # another process took it between the check and here
        check_run_dir(run_dir, ckpt_path)
        raise
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        json.dump({"pid": os.getpid(), "host": socket.gethostname()}, file)
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)


def adopt_hydra_files(run_dir: Path) -> None:
    """Hydra's files of a run accepted into a directory that existed, moved from `PENDING_HYDRA_DIR` into .hydra/
    (each replaced whole); nothing to do when Hydra wrote .hydra/ itself (a new directory)."""
    pending = run_dir / PENDING_HYDRA_DIR
    if not pending.is_dir():
        return
    (run_dir / HYDRA_DIR).mkdir(exist_ok=True)
    for file in pending.iterdir():
        os.replace(file, run_dir / HYDRA_DIR / file.name)
    pending.rmdir()


def discard_hydra_files(run_dir: Path) -> None:
    """Remove the Hydra files of a run refused before it was accepted (`adopt_hydra_files`), so that .hydra/ keeps
    those of the run the directory holds. Rank 0's alone: the other ranks' Hydra writes none."""
    pending = run_dir / PENDING_HYDRA_DIR
    if is_launch_rank_zero() and pending.is_dir():
        shutil.rmtree(pending)


def trim_metrics(run_dir: str | Path, resumed_step: int) -> int:
    """Keep metrics.csv's rows up to `resumed_step` (a resume's checkpoint), in the order they were logged, until the
    first row the resume logs again: a training row of that step or later (a training row of step k is logged by
    optimizer step k+1), or any row past it. The final validation of a run that ended at the checkpoint is logged at
    its step and kept; the resume does not repeat it. Returns how many rows were dropped."""
    path = Path(run_dir) / METRICS_FILE
    if not path.is_file():
        return 0
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        fields, rows = reader.fieldnames or [], list(reader)

    def logged_again(row: dict[str, str]) -> bool:
        if not row.get("step"):
            return False  # no step to place it by: kept
        step = float(row["step"])
        trained = any(value for name, value in row.items() if name and name.startswith("train/"))
        return step > resumed_step or (step == resumed_step and trained)

    kept = next((rows[:index] for index, row in enumerate(rows) if logged_again(row)), rows)
    if len(kept) < len(rows):
        write_rows(path, fields, ([row[name] for name in fields] for row in kept), ",")
    return len(rows) - len(kept)
