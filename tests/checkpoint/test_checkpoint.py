"""biotf.checkpoint: damaged bytes refused (checkpoints and exports), configs checked against the weights
before allocating, the user's umask, format-1 checkpoints still read, one tokenizer-mismatch message."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from biotf.io.atomic import atomic_write
from biotf.checkpoint import (CHECKPOINT_KEY, DIGEST_KEY, checkpoint_payload, ensure_same_tokenizer, read_checkpoint,
                              save_checkpoint, save_pretrained)
from biotf.errors import CheckpointError
from biotf.api import Model
from biotf.model import Transformer, TransformerConfig
from biotf.tokenizers import AminoAcidTokenizer, build_tokenizer

CONFIG = TransformerConfig(vocab_size=33, d_model=16, n_layers=2, n_heads=2, n_kv_heads=2, d_ff=32, max_seq_len=64,
                           causal=False)


@pytest.fixture
def model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(CONFIG)


def lightning_checkpoint(model: Transformer, path: Path) -> Path:
    """A checkpoint shaped as biotf training writes it (Lightning keys, `biotf` payload)."""
    state = {f"model.{name}": tensor for name, tensor in model.state_dict().items()}
    return save_checkpoint({"state_dict": state, "global_step": 3, "epoch": 0,
                            CHECKPOINT_KEY: checkpoint_payload(model.config, AminoAcidTokenizer())}, path)


def zero_inside(path: Path, tensor: torch.Tensor, count: int = 100) -> None:
    """Zero `count` bytes inside `tensor`'s stored bytes, as a bad disk sector or a torn copy would."""
    data = bytearray(path.read_bytes())
    start = data.find(tensor.detach().numpy().tobytes())
    assert start >= 0
    data[start + 64:start + 64 + count] = bytes(count)
    path.write_bytes(bytes(data))


def test_zeroed_bytes_in_a_checkpoint_are_refused(model, tmp_path):
    path = lightning_checkpoint(model, tmp_path / "last.ckpt")
    zero_inside(path, model.embed.weight)
    assert "state_dict" in torch.load(path, weights_only=True)  # torch itself reads it without complaint
    with pytest.raises(CheckpointError, match=rf"^{re.escape(str(path))} is damaged: its content has CRC-32 "
                                              r"[0-9a-f]{8}, it was written with [0-9a-f]{8}") as error:
        Model.load(path)
    assert "\n" not in str(error.value)


def test_a_changed_step_counter_is_refused_too(model, tmp_path):
    path = lightning_checkpoint(model, tmp_path / "last.ckpt")
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["global_step"] = 4
    torch.save(checkpoint, path)
    with pytest.raises(CheckpointError, match="is damaged"):
        read_checkpoint(path)


def test_non_finite_weights_of_a_checkpoint_are_refused_naming_it(model, tmp_path):
    """A diverged run's checkpoint (CRC-32 intact) loaded and computed NaN everywhere (#39)."""
    with torch.no_grad():
        model.blocks[1].attn.qkv.weight[2, 3] = float("nan")
    path = lightning_checkpoint(model, tmp_path / "last.ckpt")
    with pytest.raises(CheckpointError, match=r"last.ckpt: tensor blocks.1.attn.qkv.weight holds NaN"):
        Model.load(path)


def test_zeroed_bytes_in_exported_weights_are_refused(model, tmp_path):
    directory = save_pretrained(model, AminoAcidTokenizer(), tmp_path / "exported")
    zero_inside(directory / "model.safetensors", model.blocks[1].mlp.down.weight)
    with pytest.raises(CheckpointError, match=r"model.safetensors is damaged: its content has CRC-32"):
        Model.load(directory)


# Loads `sys.argv[1]` with the address space capped 1 GiB above what the interpreter uses after its imports:
# a model allocated from an edited config.json (gigabytes) fails with a MemoryError rather than swapping.
CAPPED_LOAD = '''
import resource, sys
from biotf.errors import CheckpointError
from biotf.api import Model
with open("/proc/self/statm") as handle:
    used = int(handle.read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (used + 2**30, resource.RLIM_INFINITY))
try:
    Model.load(sys.argv[1])
except CheckpointError as error:
    print(error)
'''


@pytest.mark.parametrize("key, value, expected", [
    ("vocab_size", 10**8, "embed.weight has shape (33, 16), the config implies (100000000, 16)"),
    ("n_layers", 10**6, "n_layers=1000000, the weights hold 2 layers"),
    ("d_ff", 10**9, "the config implies ("),  # the first MLP matrix met (gate_up or down)
])
@pytest.mark.parametrize("kind", ["exported", "checkpoint"])
def test_an_edited_config_fails_before_allocating(model, tmp_path, kind, key, value, expected):
    if kind == "exported":
        source = save_pretrained(model, AminoAcidTokenizer(), tmp_path / "exported")
        config = json.loads((source / "config.json").read_text())
        config["model"][key] = value
        (source / "config.json").write_text(json.dumps(config))
    else:
        checkpoint = read_checkpoint(lightning_checkpoint(model, tmp_path / "model.ckpt"))
        checkpoint[CHECKPOINT_KEY]["model"][key] = value
        source = save_checkpoint(checkpoint, tmp_path / "edited.ckpt")
    result = subprocess.run([sys.executable, "-c", CAPPED_LOAD, str(source)], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0 and expected in result.stdout, result.stderr[-2000:]
    assert "weights do not fit the stored model config" in result.stdout


@pytest.mark.parametrize("pos", ["learned", "sinusoidal", "rope", "alibi", "none"])
def test_every_position_encoding_round_trips(tmp_path, pos):
    """The shape check builds each kind of model without allocating its large tensors (ALiBi computes with small
    ones while it is built)."""
    torch.manual_seed(0)
    model = Transformer(replace(CONFIG, pos=pos))
    loaded = Model.load(save_pretrained(model, AminoAcidTokenizer(), tmp_path / pos)).network
    ids = torch.tensor([[1, 5, 6, 7, 2]])
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model.eval()(ids).logits)


def test_files_get_the_users_umask(model, tmp_path):
    previous = os.umask(0o027)
    try:
        directory = save_pretrained(model, AminoAcidTokenizer(), tmp_path / "exported")
        checkpoint = lightning_checkpoint(model, tmp_path / "last.ckpt")
        plain = atomic_write(tmp_path / "plain.txt", lambda path: path.write_text("x"))
        # A fine-tuned model's export: its head and task.json are written inside the same all-or-nothing directory.
        from biotf.checkpoint.task_model import HEAD_FILE, TASK_FILE, TaskInfo, save_task_model
        from biotf.model.heads import TaskModel

        info = TaskInfo("classification", ["a", "b"], "mean", 64, "crop")
        tuned = save_task_model(TaskModel(model, "classification", 2, pool="mean"), AminoAcidTokenizer(), info,
                                tmp_path / "tuned")
    finally:
        os.umask(previous)
    assert {HEAD_FILE, TASK_FILE} <= {path.name for path in tuned.iterdir()}
    for folder in (directory, tuned):
        assert folder.stat().st_mode & 0o777 == 0o750
    for path in [*directory.iterdir(), *tuned.iterdir(), checkpoint, plain]:
        assert path.stat().st_mode & 0o777 == 0o640, path


def test_a_format_1_checkpoint_with_the_duplicate_fingerprint_still_loads(model, tmp_path):
    """Written before the checksum: format 1, the fingerprint at the top level too, no CRC."""
    checkpoint = read_checkpoint(lightning_checkpoint(model, tmp_path / "new.ckpt"))
    payload = checkpoint[CHECKPOINT_KEY]
    payload.update(format=1, tokenizer_fingerprint=payload["tokenizer"]["fingerprint"])
    torch.save(checkpoint, tmp_path / "old.ckpt")
    assert DIGEST_KEY not in torch.load(tmp_path / "old.ckpt", weights_only=True)
    old = Model.load(tmp_path / "old.ckpt")
    loaded, tokenizer = old.network, old.tokenizer
    assert tokenizer.fingerprint == AminoAcidTokenizer().fingerprint
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))


def test_every_tokenizer_mismatch_reads_the_same(model, tmp_path):
    """Given tokenizer, an export's tokenizer.json, a run's tokenizer.json: one message, both fingerprints."""
    other = build_tokenizer({"kind": "protein", "rare_residues": "to_x"})
    ours = AminoAcidTokenizer().fingerprint
    pattern = (rf"^tokenizer mismatch: \S+ was trained with tokenizer fingerprint {ours}, .+ \(protein\) has "
               rf"fingerprint {other.fingerprint}$")
    exported = save_pretrained(model, AminoAcidTokenizer(), tmp_path / "exported")
    with pytest.raises(CheckpointError, match=pattern):
        ensure_same_tokenizer(Model.load(exported).tokenizer.fingerprint, other, str(exported))
    other.save(exported)  # the export's tokenizer.json swapped
    with pytest.raises(CheckpointError, match=pattern):
        Model.load(exported)
    run = tmp_path / "run"
    lightning_checkpoint(model, run / "checkpoints" / "last.ckpt")
    other.save(run)
    with pytest.raises(CheckpointError, match=pattern):
        Model.load(run)


def test_a_checkpoint_and_its_export_read_into_the_same_model(model, tmp_path):
    """`stored_model` turns either file layout into the model and tokenizer that wrote it, bit for bit."""
    from biotf.checkpoint.stored_model import load_checkpoint, load_exported

    exported = save_pretrained(model, AminoAcidTokenizer(), tmp_path / "exported")
    checkpoint = lightning_checkpoint(model, tmp_path / "last.ckpt")
    for network, tokenizer in (load_exported(exported), load_checkpoint(checkpoint)):
        assert tokenizer.fingerprint == AminoAcidTokenizer().fingerprint and not network.training
        assert network.config == model.config
        assert all(torch.equal(a, b) for a, b in zip(network.state_dict().values(), model.state_dict().values()))


def test_imports_point_downwards():
    """checkpoint sits below training, inference and export; training needs nothing from inference."""
    code = ("import sys, biotf.checkpoint; first = sorted(m for m in sys.modules if m.split('.')[0] in "
            "{'lightning', 'hydra', 'transformers'} or m.startswith(('biotf.inference', 'biotf.training', "
            "'biotf.export'))); import biotf.training.run; second = sorted(m for m in sys.modules "
            "if m.startswith('biotf.inference')); print(first, second); sys.exit(1 if first or second else 0)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
