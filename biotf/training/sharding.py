"""`trainer.strategy=fsdp`: FSDP2 (`torch.distributed.fsdp.fully_shard`) through Lightning's ModelParallelStrategy.

Every transformer block is sharded on its own, then the task module as the root (the embedding, final norm and LM
head, whose parameters the fused loss reads outside the model's forward, are gathered by the root's forward):
each rank holds 1/N of the parameters, gradients and optimizer state, and gathers one block's parameters at a
time. The same code runs on CPU processes (gloo) and on GPUs (nccl). `trainer.precision=bf16-mixed` is FSDP2's
mixed precision: parameters cast to bfloat16 for compute, gradients reduced and kept in float32, as are the
sharded master weights and the optimizer.

Checkpoints are sharded directories (`biotf.checkpoint.sharded_checkpoint`): every rank writes its shard, rank 0 the
rest and the CRC-32 of every file, into a staging directory that replaces the previous checkpoint once complete.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.strategies import ModelParallelStrategy

from biotf.checkpoint.digest import DIGEST_KEY
from biotf.checkpoint.sharded_checkpoint import (SHARDS_KEY, optimizer_by_name, rank_files, replace_directory,
                                                 write_metadata)


def shard_blocks(root: torch.nn.Module, blocks: list[torch.nn.Module], mesh: Any = None,
                 mixed_precision: bool = False) -> None:
    """`fully_shard` each of `blocks`, then `root`, over `mesh` (None: all ranks); with `mixed_precision`, parameters
    in bfloat16 for compute and gradients reduced in float32. A root already sharded is left as it is (Lightning calls
    configure_model again for the final validation)."""
    from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

    if isinstance(root, FSDPModule):
        return
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if mixed_precision else MixedPrecisionPolicy()
    for block in blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(root, mesh=mesh, mp_policy=policy)


class ShardedStrategy(ModelParallelStrategy):
    """ModelParallelStrategy as pure FSDP2 over all ranks, with biotf's checked, atomically replaced checkpoints."""

    def __init__(self, mixed_precision: bool = False):
        super().__init__(save_distributed_checkpoint=True)
        self.mixed_precision = mixed_precision

    def setup_environment(self) -> None:
        # Every rank one data-parallel shard: the mesh Lightning builds spans all processes in one dimension.
        self._data_parallel_size = self.num_nodes * self.num_processes
        self._tensor_parallel_size = 1
        super().setup_environment()

    def shard(self, root: torch.nn.Module, blocks: list[torch.nn.Module]) -> None:
        """`shard_blocks` over all ranks (called from the task's `configure_model`)."""
        shard_blocks(root, blocks, self.device_mesh["data_parallel"], self.mixed_precision)

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: str | Path,
                        storage_options: Any | None = None) -> None:
        from torch.distributed.checkpoint import save

        target = Path(self.broadcast(str(filepath)))
        staging = None
        if self.global_rank == 0:
            target.parent.mkdir(parents=True, exist_ok=True)
            staging = tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent)
        staging = Path(self.broadcast(staging))
        tensors = {"state_dict": checkpoint.pop("state_dict")}
        tensors.update({f"optimizer_{i}": state for i, state in enumerate(checkpoint.pop("optimizer_states", []))})
        save(tensors, checkpoint_id=staging)
        written = [None] * self.world_size
        torch.distributed.all_gather_object(written, rank_files(staging, self.global_rank))
        if self.global_rank == 0:
            write_metadata(staging, checkpoint, {name: crc for files in written for name, crc in files.items()})
            replace_directory(staging, target)
        self.barrier()

    def load_checkpoint(self, checkpoint_path: str | Path, weights_only: bool | None = None) -> dict[str, Any]:
        """The checkpoint, which the run checked against its CRC-32s before it started
        (`biotf.training.run.read_resumed`): a sharded directory, resharded onto this run's ranks by DCP, or a single
        file (a finished FSDP run's, or a DDP run's), each rank taking its shard of the full tensors."""
        path = Path(self.broadcast(str(checkpoint_path)))
        if path.is_dir():
            metadata = super().load_checkpoint(path, weights_only=True)
        else:
            metadata = self._load_file(path)
        for key in (DIGEST_KEY, SHARDS_KEY):
            metadata.pop(key, None)
        return metadata

    def _load_file(self, path: Path) -> dict[str, Any]:
        """A single-file checkpoint into the sharded model and optimizer: the content the run read and checked before
        it started (handed to `checkpoint_io`, `VerifiedCheckpointIO.hand_over`), not the file read again. Its
        optimizer state numbers the parameters as `Optimizer.state_dict` does (in the order of the groups), which
        Lightning's own reader of full checkpoints would take for the module's order: it is keyed by name here
        instead."""
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, set_model_state_dict,
                                                             set_optimizer_state_dict)

        checkpoint = self.checkpoint_io.load_checkpoint(path)
        options = StateDictOptions(full_state_dict=True)
        set_model_state_dict(self.model, checkpoint.pop("state_dict"), options=options)
        names = {id(parameter): name for name, parameter in self.model.named_parameters()}
        for optimizer, state in zip(self.optimizers, checkpoint.pop("optimizer_states", [])):
            order = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
            set_optimizer_state_dict(self.model, optimizer, optimizer_by_name(state, order), options=options)
        return checkpoint
