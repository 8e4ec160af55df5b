"""Sharded checkpoints: a directory that every rank of an FSDP2 run writes its part of, checked and consolidated.

A sharded checkpoint `<name>.ckpt/` holds the shards `torch.distributed.checkpoint` (DCP) writes, one file per rank
(`__<rank>_0.distcp`) and its `.metadata`, and `meta.pt`: everything else Lightning saves (step, loops, callbacks,
schedulers, the `biotf` payload), written by rank 0 through `save_checkpoint` (so it carries its own CRC-32), with
`SHARDS_KEY` = {file name: CRC-32 of its bytes} for every other file. `verify_sharded` checks them all before a
resume reads anything, so a damaged shard is one line naming it, as a damaged single-file checkpoint is.

DCP stores every tensor with its global shape and offset, so a checkpoint written by N processes loads on M
(resharding). `consolidate` turns one into the single file a DDP run writes (full weights, the optimizer state keyed
as `torch.optim.Optimizer.state_dict` keys it), which every command reads; it needs no process group.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zlib
from pathlib import Path
from typing import Any

import torch

from biotf.checkpoint.store import read_checkpoint, save_checkpoint
from biotf.errors import CheckpointError
from biotf.io.atomic import _umask, atomic_write

METADATA_FILE = "meta.pt"  # the name Lightning's ModelParallelStrategy reads the non-tensor state from
SHARDS_KEY = "biotf_shards"
CHUNK = 1 << 24


def is_sharded(path: str | Path) -> bool:
    """Whether `path` is a sharded checkpoint directory (it holds DCP's `.metadata`)."""
    return Path(path).is_dir() and (Path(path) / ".metadata").is_file()


def file_crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


def rank_files(directory: Path, rank: int) -> dict[str, int]:
    """{name: CRC-32} of the shard files rank `rank` wrote into `directory` (and DCP's `.metadata` for rank 0)."""
    names = sorted(p.name for p in directory.glob(f"__{rank}_*.distcp"))
    if rank == 0:
        names.append(".metadata")
    return {name: file_crc32(directory / name) for name in names}


def write_metadata(directory: Path, metadata: dict[str, Any], shards: dict[str, int]) -> None:
    """Rank 0's `meta.pt`: the checkpoint's non-tensor state and the CRC-32 of every shard file."""
    save_checkpoint({**metadata, SHARDS_KEY: dict(sorted(shards.items()))}, directory / METADATA_FILE)


def verify_sharded(path: str | Path) -> dict[str, Any]:
    """The checkpoint's `meta.pt` content (without the shard list), once every shard file matches its CRC-32."""
    path = Path(path)
    metadata = read_checkpoint(path / METADATA_FILE)
    shards = metadata.pop(SHARDS_KEY, None)
    if not isinstance(shards, dict) or ".metadata" not in shards:
        raise CheckpointError(f"{path} is not a biotf sharded checkpoint: {METADATA_FILE} lists no shard files")
    for name, expected in shards.items():
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"sharded checkpoint {path} lacks {name} (use an earlier checkpoint, or retrain)")
        actual = file_crc32(file)
        if actual != expected:
            raise CheckpointError(f"{file} is damaged: its content has CRC-32 {actual:08x}, it was written with "
                                  f"{int(expected):08x} (use an earlier checkpoint, or retrain)")
    return metadata


def read_resumable(path: str | Path) -> dict[str, Any]:
    """What a resume reads before training starts, checked: a checkpoint file's content, or a sharded checkpoint's
    `meta.pt` once every file matches its CRC-32 (`verify_sharded`)."""
    return verify_sharded(path) if is_sharded(path) else read_checkpoint(path)


def replace_directory(staging: Path, target: Path) -> None:
    """Put the finished `staging` directory at `target`, the previous one (a directory or a file) removed after: a
    crash in between leaves the previous one beside it as `.<name>.previous`."""
    previous = target.with_name(f".{target.name}.previous")
    if previous.is_dir():
        shutil.rmtree(previous)
    elif previous.exists():
        previous.unlink()
    if target.exists():
        target.rename(previous)
    if staging.is_dir():
        os.chmod(staging, 0o777 & ~_umask())  # as a plain mkdir() would have made it, not mkdtemp's 0700
    staging.rename(target)
    if previous.is_dir():
        shutil.rmtree(previous)
    elif previous.exists():
        previous.unlink()


def _optimizer_by_index(state: dict[str, Any]) -> dict[str, Any]:
    """An optimizer state DCP holds keyed by parameter name (`get_optimizer_state_dict`) as `Optimizer.state_dict`
    keys it: parameters numbered in the order the groups list them."""
    index: dict[str, int] = {}
    groups = []
    for group in state["param_groups"]:
        numbers = [index.setdefault(name, len(index)) for name in group["params"]]
        groups.append({**group, "params": numbers})
    return {"state": {index[name]: value for name, value in state["state"].items()}, "param_groups": groups}


def optimizer_by_name(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """`Optimizer.state_dict`'s form keyed by parameter name, the inverse of `_optimizer_by_index`: `names` are the
    optimizer's parameters in the order its groups list them."""
    groups, start = [], 0
    for group in state["param_groups"]:
        groups.append({**group, "params": names[start:start + len(group["params"])]})
        start += len(group["params"])
    return {"state": {names[index]: value for index, value in state["state"].items()}, "param_groups": groups}


def read_full(path: str | Path) -> dict[str, Any]:
    """A sharded checkpoint as the single-file checkpoint DDP writes: full `state_dict`, `optimizer_states` and the
    rest of `meta.pt`, checked first (`verify_sharded`). Reads every shard into this process's memory."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    path = Path(path)
    metadata = verify_sharded(path)
    with tempfile.TemporaryDirectory(prefix=".consolidate.", dir=path.parent) as scratch:
        whole = Path(scratch) / "whole.pt"
        dcp_to_torch_save(path, whole)
        tensors = torch.load(whole, map_location="cpu", weights_only=True)
    optimizers = sorted((key for key in tensors if key.startswith("optimizer_")), key=lambda k: int(k.split("_")[1]))
    return {**metadata, "state_dict": tensors["state_dict"],
            "optimizer_states": [_optimizer_by_index(tensors[key]) for key in optimizers]}


def consolidate(path: str | Path) -> Path:
    """Replace the sharded checkpoint directory `path` by the single file DDP would have written there."""
    path = Path(path)
    checkpoint = read_full(path)
    staging = path.with_name(f".{path.name}.consolidated")
    save_checkpoint(checkpoint, staging)
    replace_directory(staging, path)
    return path


def copy_checkpoint(source: Path, target: Path) -> None:
    """Copy a checkpoint, a file or a sharded directory, to `target`, which appears complete or not at all."""
    if source.is_dir():
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        shutil.copytree(source, staging, dirs_exist_ok=True)
        replace_directory(staging, target)
    else:
        atomic_write(target, lambda temporary: shutil.copyfile(source, temporary))
