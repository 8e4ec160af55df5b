"""Bulk inference over several processes: records cut into numbered parts, parts dealt to ranks, a manifest to
resume from, one output merged in input order (`biotf embed`, `score`, `predict` launched by `torchrun`).

    torchrun --nproc-per-node 2 -m biotf embed --model run/ --input proteins.fasta --output proteins.h5ad

Parts. Record i (0-based, input order) belongs to part i // `part_records`. Every rank streams the whole input
through the shared readers (parsing is cheap next to the model; it also means every rank counts the reader's
policies of the whole file, exactly as one process would) and runs the model only on its own parts: the parts not
kept from an earlier run, dealt in turn (the j-th of them to rank j % world_size), so a resume spreads what is left
over every rank whatever their number. A rank writes part k into `part-<k>.tmp/`, renames it `part-<k>/` when
complete, then records it in `part-<k>.json` (its records, every file's size and CRC-32, and its counts): a part
is finished exactly when its entry exists, so a crash, SIGTERM or SIGKILL of any rank loses only parts in progress.

The work folder `<output>.parts/` beside the output holds `manifest.json` (what the parts are made of: the input's
size and CRC-32, the reader options, `part_records` and the command's `identity`: the model's fingerprint and every
setting that changes the output) and the parts. Rank 0 checks it before any work: the same identity keeps every
part whose files match their CRC-32 (a damaged or unfinished one is redone, and said); another identity is refused
in one line naming what changed, unless `overwrite` starts over. Settings that cost only time or memory (batch
size, device, number of processes) may change. Every node must see the folder (a shared filesystem): each rank
checks it reads the manifest rank 0 just wrote. One run at a time per output (`run.lock`, an advisory lock).

After its parts a rank waits for the others; rank 0 then sums the parts' counts, merges the parts in order through
the command's own writer (so the file is the one a single process writes: all or nothing, same bytes for the same
values) and removes the work folder. Ranks coordinate over gloo whatever the device: only the plan and a barrier
pass between them, never tensors, so the model may sit on `cuda:<LOCAL_RANK>` without NCCL.
"""

from __future__ import annotations

import bisect
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from itertools import groupby
from pathlib import Path
from typing import IO, Any, Protocol

from biotf.io.atomic import atomic_write_text
from biotf.io.readers import ReaderOptions, Record, read_records
from biotf.errors import BiotfError, ConfigError, InputError
from biotf.tokenizers.base import PolicyStats
from biotf.untrusted import file_crc32, parse_json_object, read_json_object
from biotf.conventions import counted
from biotf.naming import parameter

try:  # POSIX; elsewhere two runs over one output are not told apart
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

PART_RECORDS = 1024  # a multiple of the scorer's 256 records per call, so parts batch as one process does
MANIFEST = "manifest.json"
LOCK = "run.lock"
PART_NAME = re.compile(r"part-(\d{6,})(\.json|\.tmp)?")
# Rank 0 waits at the end for the slowest rank, and the others wait at the start while rank 0 checksums the input
# and the kept parts: hours at worst. A dead rank does not make anyone wait this long: torchrun stops the others.
WAIT = timedelta(hours=24)


@dataclass(frozen=True)
class Launch:
    """This process's place in a `torchrun` launch (torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
    MASTER_PORT; under Slurm run one torchrun per node)."""

    rank: int
    world_size: int
    local_rank: int

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Launch | None:
        """The launch the environment describes, or None outside torchrun (no WORLD_SIZE): a plain one-process run."""
        if "WORLD_SIZE" not in environ:
            return None
        values = {}
        for name, minimum in (("RANK", 0), ("WORLD_SIZE", 1), ("LOCAL_RANK", 0)):
            text = environ.get(name, "0")
            if not text.isdigit() or int(text) < minimum:
                raise ConfigError(name, text, allowed=f"an integer >= {minimum} (the environment torchrun sets)")
            values[name] = int(text)
        if values["RANK"] >= values["WORLD_SIZE"]:
            raise ConfigError("RANK", values["RANK"], allowed=f"0..{values['WORLD_SIZE'] - 1} (WORLD_SIZE)")
        if values["WORLD_SIZE"] > 1:
            for name in ("MASTER_ADDR", "MASTER_PORT"):
                if not environ.get(name):
                    raise ConfigError(name, None, reason="a run over several processes needs it (torchrun sets it)")
        return cls(values["RANK"], values["WORLD_SIZE"], values["LOCAL_RANK"])

    def device(self, device: str) -> str:
        """`cuda` (no index) means this rank's own GPU, `cuda:<LOCAL_RANK>`; anything else stays as given."""
        return f"{device}:{self.local_rank}" if device == "cuda" else device


class PartWork(Protocol):
    """What a command does to a run of records: `embed`, `score` and `predict` each provide one."""

    def identity(self) -> dict[str, Any]:
        """JSON values that decide the output (model fingerprint, settings): a resume must find them unchanged."""

    def write_part(self, records: Iterator[Record], directory: Path) -> dict[str, Any]:
        """Run on `records` and leave the results in files of the existing, empty `directory`; returns the part's
        counts: integers, or mappings of integers (e.g. tokenizer policies), summed over parts."""

    def merge(self, parts: list[Path], output: Path, counts: dict[str, Any]) -> None:
        """Write `output` from the part directories, in order, with the counts summed over all of them."""


@dataclass
class ShardedRun:
    """What a sharded run did (rank 0): counts summed over every part, the reader's policies over the whole file."""

    counts: dict[str, Any]
    reader_policies: PolicyStats
    parts: int
    kept: int
    redone: int
    world_size: int
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        redone = f", {self.redone} damaged or unfinished redone" if self.redone else ""
        return (f"{counted(self.parts, 'part')}: {self.kept} kept from an earlier run{redone}, "
                f"{self.parts - self.kept} done now by {counted(self.world_size, 'rank')}; merged in input order")


def work_folder(output: str | Path) -> Path:
    """The folder of an output's parts: `<output>.parts` beside it."""
    output = Path(output)
    return output.parent / f"{output.name}.parts"


def add_counts(total: dict[str, Any], counts: Mapping[str, Any]) -> dict[str, Any]:
    """`total` plus `counts`, key by key (integers, and mappings of integers one level down)."""
    for key, value in counts.items():
        if isinstance(value, Mapping):
            inner = total.setdefault(key, {})
            for name, count in value.items():
                inner[name] = inner.get(name, 0) + count
        else:
            total[key] = total.get(key, 0) + value
    return total


class _Group:
    """The ranks' channel (gloo; nothing at all for one process): rank 0's plan to every rank, and a barrier."""

    def __init__(self, launch: Launch):
        self.launch = launch
        if launch.world_size > 1:
            import torch.distributed as dist

            dist.init_process_group("gloo", rank=launch.rank, world_size=launch.world_size, timeout=WAIT)

    def share(self, text: str) -> str:
        """Rank 0's `text`, on every rank."""
        if self.launch.world_size == 1:
            return text
        import torch
        import torch.distributed as dist

        data = text.encode("utf-8") if self.launch.rank == 0 else b""
        size = torch.tensor([len(data)], dtype=torch.int64)
        dist.broadcast(size, 0)
        buffer = torch.empty(int(size), dtype=torch.uint8)
        if data:
            buffer = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        dist.broadcast(buffer, 0)
        return bytes(buffer.numpy()).decode("utf-8")

    def wait(self) -> None:
        if self.launch.world_size > 1:
            import torch.distributed as dist

            dist.barrier()

    def close(self) -> None:
        if self.launch.world_size > 1:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()


def _part_path(folder: Path, part: int, suffix: str = "") -> Path:
    return folder / f"part-{part:06d}{suffix}"


def _files(directory: Path) -> dict[str, list[int]]:
    """Every file of a part directory: name -> [bytes, CRC-32]."""
    return {path.name: [path.stat().st_size, file_crc32(path)] for path in sorted(directory.iterdir())}


def _take_lock(folder: Path) -> IO | None:
    """Hold `run.lock` of the folder while this run lives (released by the kernel when rank 0 dies)."""
    if fcntl is None:
        return None
    handle = open(folder / LOCK, "a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise InputError(f"{folder} is in use by another run over the same output; wait for it to end") from None
    return handle


def _changes(stored: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """What differs between the manifest's identity and this run's, worded for the refusal."""
    changed = []
    for key in wanted:
        if key == "precision" and key not in stored:
            continue  # parts made before outputs recorded it: the model's fingerprint still tells a change
        if key == "model_fingerprint" and "precision" in stored and stored["precision"] != wanted.get("precision"):
            continue  # another precision computes with other weights: the precision, listed, says why
        if stored.get(key) != wanted[key]:
            if key == "input":
                old, new = stored.get(key) or {}, wanted[key]
                changed.append(f"the input (now {new['bytes']:,} bytes, CRC-32 {new['crc32']:08x}; the parts were "
                               f"made from {old.get('bytes', 0):,} bytes, CRC-32 {old.get('crc32', 0):08x})")
            else:
                changed.append(f"{key} ({stored.get(key)!r} -> {wanted[key]!r})")
    return changed


def _prepare(folder: Path, identity: dict[str, Any], overwrite: bool) -> tuple[dict[str, Any], IO | None]:
    """Rank 0, before any work: check, clean and (re)write the work folder; returns the plan every rank follows and
    the held lock."""
    if folder.exists() or folder.is_symlink():
        # a manifest, or nothing but what rank 0 makes before it (the lock): a start killed before its manifest
        ours = (folder.is_dir() and not folder.is_symlink()
                and ((folder / MANIFEST).is_file() or {path.name for path in folder.iterdir()} <= {LOCK}))
        if not ours:
            raise InputError(f"{folder} exists and is not a parts folder of biotf (no {MANIFEST}); move it away, "
                             "biotf never deletes what it did not write")
    else:
        folder.mkdir(parents=True)
    lock = _take_lock(folder)
    try:
        kept, redone = _kept_parts(folder, identity, overwrite)
        nonce = uuid.uuid4().hex
        atomic_write_text(folder / MANIFEST, json.dumps({"biotf_parts": 1, "run": nonce, **identity}, indent=1))
    except BaseException:
        if lock is not None:
            lock.close()
        raise
    return {"done": kept, "redone": redone, "run": nonce}, lock


def _kept_parts(folder: Path, identity: dict[str, Any], overwrite: bool) -> tuple[list[int], int]:
    """The finished parts an earlier run of the same identity left (sorted), and how many others were removed."""
    if (folder / MANIFEST).is_file():
        stored = read_json_object(folder / MANIFEST, "parts manifest")
        changed = _changes(stored, identity)
        if changed and not overwrite:
            raise InputError(f"{folder} holds parts of another run: {'; '.join(changed)} changed; rerun with "
                             f"{parameter('overwrite')} to start over")
    kept, removed = [], 0
    entries = {}
    for path in folder.iterdir():
        match = PART_NAME.fullmatch(path.name)
        if match is None:
            continue
        entries.setdefault(int(match.group(1)), {})[match.group(2) or ""] = path
    for part, paths in sorted(entries.items()):
        entry, data = paths.get(".json"), paths.get("")
        if not overwrite and entry is not None and data is not None and data.is_dir():
            try:
                stored_files = read_json_object(entry, "part entry").get("files")
            except InputError:
                stored_files = None
            if stored_files == _files(data):
                kept.append(part)
                continue
        removed += entry is not None or data is not None  # an entry or a finished directory: a part redone
        for path in paths.values():
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
    return kept, 0 if overwrite else removed


def _write_part(work: PartWork, folder: Path, part: int, records: Iterator[Record]) -> None:
    temporary = _part_path(folder, part, ".tmp")
    if temporary.exists():
        shutil.rmtree(temporary)
    temporary.mkdir()
    count = 0

    def counting() -> Iterator[Record]:
        nonlocal count
        for record in records:
            count += 1
            yield record

    counts = work.write_part(counting(), temporary)
    files = _files(temporary)
    final = _part_path(folder, part)
    os.rename(temporary, final)
    atomic_write_text(_part_path(folder, part, ".json"),
                      json.dumps({"part": part, "records": count, "files": files, "counts": counts}))


def run_parts(work: PartWork, input_path: str | Path, output: str | Path, launch: Launch,
              reader_options: ReaderOptions = ReaderOptions(), part_records: int = PART_RECORDS,
              overwrite: bool = False) -> ShardedRun | None:
    """This rank's share of a sharded run (see the module docstring); rank 0 merges and returns what was done,
    the other ranks return None once their parts are written."""
    if isinstance(part_records, bool) or not isinstance(part_records, int) or part_records < 1:
        raise ConfigError(parameter("part_records"), part_records, allowed="an integer >= 1")
    input_path, output = Path(input_path), Path(output)
    folder = work_folder(output)
    group = _Group(launch)
    lock = None
    try:
        if launch.rank == 0:
            try:
                if not input_path.is_file():
                    raise InputError(f"input file {input_path} does not exist")
                identity = {"input": {"bytes": input_path.stat().st_size, "crc32": file_crc32(input_path)},
                            "reader": reader_options.as_key(), "part_records": part_records, **work.identity()}
                plan, lock = _prepare(folder, identity, overwrite)
            except BiotfError as error:
                group.share(json.dumps({"error": str(error)}))
                raise
            group.share(json.dumps(plan))
        else:
            plan = json.loads(group.share(""))
            if "error" in plan:
                raise SystemExit(2)  # rank 0 prints the one line
            stored = read_json_object(folder / MANIFEST, "parts manifest") if (folder / MANIFEST).is_file() else {}
            if stored.get("run") != plan["run"]:
                raise InputError(f"{folder}: rank {launch.rank} does not see the manifest rank 0 wrote; every node "
                                 "must see the output's folder (a shared filesystem)")
        done = plan["done"]
        kept = set(done)
        reader_policies = PolicyStats()
        parts = 0
        for part, records in groupby(read_records(input_path, reader_options, reader_policies),
                                     key=lambda record: record.index // part_records):
            parts = part + 1
            if part not in kept and (part - bisect.bisect_left(done, part)) % launch.world_size == launch.rank:
                _write_part(work, folder, part, records)
        group.wait()
        if launch.rank != 0:
            return None
        return _merge(work, folder, output, parts, reader_policies, plan, launch.world_size)
    finally:
        if lock is not None:
            lock.close()
        group.close()


def _merge(work: PartWork, folder: Path, output: Path, parts: int, reader_policies: PolicyStats,
           plan: dict[str, Any], world_size: int) -> ShardedRun:
    counts: dict[str, Any] = {}
    for part in range(parts):
        path = _part_path(folder, part, ".json")
        if not path.is_file():
            raise InputError(f"{folder}: part {part} is missing after every rank finished (a rank on a node that does "
                             "not share this folder?)")
        add_counts(counts, parse_json_object(path.read_text(encoding="utf-8"), str(path), "part entry")["counts"])
    work.merge([_part_path(folder, part) for part in range(parts)], output, counts)
    shutil.rmtree(folder)
    return ShardedRun(counts, reader_policies, parts, len(plan["done"]), plan["redone"], world_size)
