"""A sharded checkpoint directory (`biotf.checkpoint.sharded_checkpoint`), written here by one process as DCP writes
each rank's part: every file checked against its CRC-32, and consolidated into the single file DDP writes."""

from __future__ import annotations

import pytest
import torch

from biotf.checkpoint import read_checkpoint
from biotf.checkpoint.sharded_checkpoint import (consolidate, is_sharded, rank_files, read_full, read_resumable,
                                                 write_metadata)
from biotf.errors import CheckpointError

# DCP writes here without a process group (one rank), as it says
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


@pytest.fixture
def sharded(tmp_path):
    """last.ckpt/ as the strategy writes it: DCP's shards and .metadata, then meta.pt with the files' CRC-32s."""
    from torch.distributed.checkpoint import save

    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    optimizer = torch.optim.AdamW([{"params": [model[0].weight, model[1].weight]},
                                   {"params": [model[0].bias, model[1].bias], "weight_decay": 0.0}])
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    names = {id(p): f"model.{n}" for n, p in model.named_parameters()}
    by_name = {"state": {names[id(p)]: state for p, state in optimizer.state.items()},
               "param_groups": [{**{k: v for k, v in g.items() if k != "params"},
                                 "params": [names[id(p)] for p in g["params"]]} for g in optimizer.param_groups]}
    directory = tmp_path / "last.ckpt"
    save({"state_dict": {f"model.{n}": t for n, t in model.state_dict().items()}, "optimizer_0": by_name},
         checkpoint_id=directory, no_dist=True)
    write_metadata(directory, {"global_step": 7, "biotf": {"format": 2}}, rank_files(directory, 0))
    return directory, model, optimizer


def test_a_sharded_checkpoint_reads_as_the_single_file_ddp_writes(sharded):
    directory, model, optimizer = sharded
    assert is_sharded(directory)
    assert read_resumable(directory) == {"global_step": 7, "biotf": {"format": 2}}  # checked, without the tensors
    full = read_full(directory)
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(full["state_dict"][f"model.{name}"], tensor, rtol=0, atol=0)
    expected = optimizer.state_dict()  # parameters numbered in the order the groups list them
    groups = full["optimizer_states"][0]["param_groups"]
    assert [g["params"] for g in groups] == [g["params"] for g in expected["param_groups"]]
    for index, moments in expected["state"].items():
        for key, value in moments.items():
            torch.testing.assert_close(full["optimizer_states"][0]["state"][index][key], value, rtol=0, atol=0)
    consolidate(directory)
    assert directory.is_file()
    assert read_checkpoint(directory)["global_step"] == 7


@pytest.mark.parametrize("damage", ["flip a byte", "remove"])
def test_a_damaged_or_missing_shard_is_one_line_naming_it(sharded, damage):
    directory = sharded[0]
    shard = directory / "__0_0.distcp"
    if damage == "remove":
        shard.unlink()
    else:
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0xFF
        shard.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="__0_0.distcp" if damage == "remove" else "__0_0.distcp is damaged"):
        read_resumable(directory)
