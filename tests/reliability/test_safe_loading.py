"""Files from elsewhere cannot run code: pickles that would execute on load are refused, not executed;
nothing passes `trust_remote_code`; a user config cannot name a class for Hydra to instantiate.

The malicious payload's `__reduce__` makes unpickling call `Path.touch(marker)`; each test first shows
that a plain `torch.load(weights_only=False)` really runs it (so the refusal is what keeps the marker away).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch

from biotf.cli import main
from biotf.errors import CheckpointError
from biotf.checkpoint import save_pretrained
from biotf.api import Model
from biotf.model import Transformer, TransformerConfig
from biotf.model.hf import read_weights
from biotf.tokenizers import AminoAcidTokenizer

REPO = Path(__file__).resolve().parents[2]
SOURCES = [*sorted((REPO / "biotf").rglob("*.py")), REPO / "train.py", *sorted((REPO / "scripts").rglob("*.py"))]


class Payload:
    """Unpickling this object calls `Path(marker).touch()`: stands for any code an attacker picks."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def malicious_file(path: Path, marker: Path, wrap=lambda payload: payload, zip_format: bool = True) -> Path:
    """A torch.save file (zip, or torch's legacy bare pickle) whose unpickling creates `marker`; checked live, then
    the marker removed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(wrap(Payload(marker)), path, _use_new_zipfile_serialization=zip_format)
    torch.load(path, weights_only=False)  # the unsafe way really executes it
    assert marker.exists()
    marker.unlink()
    return path


def assert_plain_refusal(message: str) -> None:
    """One line that says why, without torch's advice to load the file unsafely (`weights_only=False`) or its
    terminal escape codes."""
    assert len(message.strip().splitlines()) == 1, message
    assert "could run code" in message, message
    assert "weights_only" not in message and "can still be loaded" not in message and "\x1b" not in message, message


def lightning_like(payload: Payload) -> dict:
    """Shaped like a biotf checkpoint, so only the unpickler stands between the file and the code."""
    return {"state_dict": {"model.embed.weight": payload}, "biotf": {"format": 1}, "global_step": 1}


@pytest.mark.parametrize("layout", ["ckpt_file", "run_directory"])
def test_model_load_refuses_code_in_a_checkpoint(tmp_path, layout):
    marker = tmp_path / "executed"
    ckpt = tmp_path / "run" / "checkpoints" / "last.ckpt"
    malicious_file(ckpt, marker, lightning_like)
    with pytest.raises(CheckpointError, match="cannot read checkpoint .*last.ckpt"):
        Model.load(ckpt if layout == "ckpt_file" else tmp_path / "run")
    assert not marker.exists()


@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy-pickle"])
def test_hugging_face_pytorch_model_bin_refused(tmp_path, zip_format):
    marker = tmp_path / "executed"
    malicious_file(tmp_path / "hf" / "pytorch_model.bin", marker, lambda p: {"model.embed_tokens.weight": p},
                   zip_format)
    with pytest.raises(CheckpointError, match="pytorch_model.bin as plain tensors") as refused:
        read_weights(tmp_path / "hf")
    assert not marker.exists()
    assert_plain_refusal(str(refused.value))


@pytest.mark.parametrize("command", ["export-model", "embed", "generate", "train-resume"])
def test_cli_commands_refuse_code_with_exit_2(capsys, tmp_path, command):
    marker = tmp_path / "executed"
    ckpt = malicious_file(tmp_path / "model.ckpt", marker, lightning_like)
    fasta = tmp_path / "in.fasta"
    fasta.write_text(">p1\nMKV\n")
    argv = {"export-model": ["export-model", str(ckpt), str(tmp_path / "out")],
            "embed": ["embed", "--no-progress", "--model", str(ckpt), "--input", str(fasta),
                      "--output", str(tmp_path / "e.npz")],
            "generate": ["generate", "--model", str(ckpt), "--prompt", "MKV", "--max-new-tokens", "1"],
            "train-resume": ["train", "model=tiny", "model.max_seq_len=64", "data.max_length=64",
                             "trainer.max_steps=1", "trainer.enable_progress_bar=false", f"data.path={fasta}",
                             f"data.cache_dir={tmp_path / 'cache'}", f"ckpt_path={ckpt}",
                             f"hydra.run.dir={tmp_path / 'run'}"]}[command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "model.ckpt" in err
    assert_plain_refusal(err)
    assert not marker.exists() and not (tmp_path / "out").exists() and not (tmp_path / "e.npz").exists()


def test_exported_directory_reads_safetensors_only(tmp_path):
    """An exported model is read from model.safetensors; a pickle dropped beside it is never opened."""
    config = TransformerConfig(vocab_size=33, d_model=8, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=16, max_seq_len=16)
    directory = save_pretrained(Transformer(config), AminoAcidTokenizer(), tmp_path / "exported")
    marker = tmp_path / "executed"
    for name in ("pytorch_model.bin", "model.ckpt", "training_args.bin"):
        malicious_file(directory / name, marker, lambda p: {"w": p})
    model = Model.load(directory).network
    assert model.config.d_model == 8 and not marker.exists()


# --- static guarantees over the whole source tree ----------------------------------------------
def calls(name: str) -> list[tuple[Path, ast.Call]]:
    """Every call of a function or method named `name` in biotf's sources."""
    found = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                if called == name:
                    found.append((path, node))
    return found


def keyword(call: ast.Call, name: str):
    for item in call.keywords:
        if item.arg == name and isinstance(item.value, ast.Constant):
            return item.value.value
    return None


def test_no_trust_remote_code_anywhere():
    files = [*SOURCES, *sorted((REPO / "biotf" / "conf").rglob("*.yaml")), *sorted((REPO / "tests").rglob("*.py"))]
    hits = [str(p.relative_to(REPO)) for p in files
            if p != Path(__file__) and "trust_remote_code" in p.read_text(encoding="utf-8")]
    assert hits == []


def test_every_torch_load_is_weights_only_and_no_raw_unpickling():
    loads = calls("load")
    torch_loads = [(p, c) for p, c in loads if isinstance(c.func, ast.Attribute)
                   and getattr(c.func.value, "id", None) == "torch"]
    assert torch_loads, "the scan found no torch.load: it would prove nothing"
    unsafe = [f"{p.relative_to(REPO)}:{c.lineno}" for p, c in torch_loads if keyword(c, "weights_only") is not True]
    assert unsafe == []
    for path, call in loads:
        owner = getattr(getattr(call.func, "value", None), "id", None)
        assert owner not in ("pickle", "dill", "cloudpickle", "joblib"), f"{path}:{call.lineno}"
        if owner == "np":
            assert keyword(call, "allow_pickle") is False, f"{path}:{call.lineno}"
        if owner == "yaml":
            pytest.fail(f"{path}:{call.lineno}: yaml.load can build arbitrary objects; use yaml.safe_load")


def test_hydra_never_instantiates_targets():
    """biotf builds every object itself from validated dataclasses: no `hydra.utils.instantiate`, so a
    `_target_` in a user config names nothing that runs."""
    assert calls("instantiate") == [] and calls("call") == []
    text = "\n".join(p.read_text(encoding="utf-8") for p in SOURCES)
    assert not re.search(r"from hydra\.utils import|hydra\.utils\.", text)


@pytest.mark.parametrize("override", ["+model._target_=pathlib.Path.touch", "+_target_=pathlib.Path.touch",
                                      "+tokenizer._target_=pathlib.Path.touch", "+optim._target_=torch.optim.SGD",
                                      "+trainer._target_=lightning.Trainer"])
def test_a_target_in_user_config_is_refused_at_startup(capsys, tmp_path, override):
    fasta = tmp_path / "in.fasta"
    fasta.write_text(">p1\nMKVLA\n>p2\nMKVLA\n")
    status = main(["train", override, "model=tiny", "model.max_seq_len=64", "data.max_length=64", "trainer.max_steps=1",
                   "trainer.enable_progress_bar=false", f"data.path={fasta}", f"data.cache_dir={tmp_path / 'cache'}",
                   f"hydra.run.dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert status == 2 and "_target_" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "run").exists()
