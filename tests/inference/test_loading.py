"""`find_source` and `Model.load`: the one loader table decides what a model source is, every source's loader returns
a `LoadedModel`, and a Hugging Face directory's generation settings are read when generation is asked for."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from biotf.checkpoint import CHECKPOINT_KEY, checkpoint_payload, save_checkpoint
from biotf.errors import CheckpointError, ConfigError
from biotf.inference.pretrained import GenerationDefaults
from biotf.checkpoint import loading
from biotf.checkpoint.loading import LoadedModel, SourceOptions, find_source, load_source
from biotf.api import Model
from biotf.model import Transformer, TransformerConfig
from biotf.tokenizers import build_tokenizer


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A biotf run of a tiny causal protein model, holding a Hugging Face-looking config.json as well."""
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(vocab_size=33, d_model=16, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=32,
                                          max_seq_len=32))
    state = {f"model.{name}": tensor for name, tensor in model.state_dict().items()}
    payload = checkpoint_payload(model.config, build_tokenizer({"kind": "protein"}))
    (tmp_path / "checkpoints").mkdir()
    save_checkpoint({"state_dict": state, "global_step": 1, "epoch": 0, CHECKPOINT_KEY: payload},
                    tmp_path / "checkpoints" / "last.ckpt")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    return tmp_path


def test_a_run_is_a_run_even_with_a_hugging_face_config(run_dir):
    """The table's order decides, not a second test of its own: the run directory comes first."""
    assert find_source(run_dir).name == "run directory"
    loaded = Model.load(run_dir, dtype="bfloat16")
    model, tokenizer, defaults = loaded.network, loaded.tokenizer, loaded.generation
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16} and not model.training
    # nothing stored: greedy (plain sampling when a temperature is given), start after and stop at <eos>, as CLM
    # packing trains a run (records joined by <eos>), up to the model's positions
    assert defaults == GenerationDefaults(eos_token_ids=(tokenizer.eos_id,), pad_token_id=tokenizer.pad_id,
                                          max_new_tokens=None, top_k=None, start_token_id=tokenizer.eos_id,
                                          prompt_after_start=True)
    assert defaults.temperature == 0.0
    assert defaults.encode_prompt(tokenizer, "MK") == [tokenizer.eos_id] + tokenizer.encode("MK", False)
    assert defaults.new_tokens(3, model.config.max_seq_len) == 29


def test_a_masked_lm_is_refused_in_one_line(run_dir, tmp_path):
    from biotf.checkpoint import save_pretrained

    loaded = Model.load(run_dir)
    model, tokenizer = loaded.network, loaded.tokenizer
    mlm = Transformer(TransformerConfig(**{**model.config.__dict__, "causal": False}))
    directory = save_pretrained(mlm, tokenizer, tmp_path / "mlm")
    with pytest.raises(CheckpointError, match=r"is a masked-LM \(causal: false\), which cannot generate"):
        Model.load(directory).decoding()


def test_a_hugging_face_directory_brings_its_generation_config(tied_checkpoint, tied):
    assert find_source(tied_checkpoint).name == "Hugging Face directory (Qwen2, ESM)"
    loaded = Model.load(tied_checkpoint, dtype="bfloat16")
    assert loaded.generation is None  # generation_config.json is read when generation is asked for, not at load
    model, tokenizer, (_, defaults) = loaded.network, loaded.tokenizer, loaded.decoding()
    assert defaults == tied.defaults and loaded.generation == tied.defaults
    assert tokenizer.fingerprint == tied.tokenizer.fingerprint
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}


def test_refusals_name_the_problem(run_dir, tmp_path):
    with pytest.raises(ConfigError, match="allowed: float32, bfloat16"):
        Model.load(run_dir, dtype="float16")
    with pytest.raises(CheckpointError, match="does not exist"):
        find_source(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match=r"allowed: fine-tuning run directory, fine-tuned export, run directory, "
                                              r"checkpoint, exported directory, Hugging Face"):
        Model.load(tmp_path / "empty")


def test_every_source_loads_into_a_loaded_model(run_dir, tied_checkpoint, tmp_path):
    """Each loader of the table returns what `Model.load` builds on: network (CPU, eval), tokenizer and, where the
    source has them, task head and generation settings; `load_source` names the source and its kind."""
    from biotf.checkpoint import save_pretrained
    from biotf.checkpoint.stored_model import load_exported
    from biotf.checkpoint.task_export import TaskInfo
    from biotf.checkpoint.task_model import save_task_model
    from biotf.model.heads import TaskModel

    run = load_source(run_dir)
    exported = save_pretrained(run.network, run.tokenizer, tmp_path / "exported")
    save_task_model(TaskModel(run.network, "regression", 1), run.tokenizer,
                    TaskInfo("regression", None, "mean", 32, "crop", "target"), tmp_path / "tuned" / "model")
    sources = {run_dir: "run directory", run_dir / "checkpoints" / "last.ckpt": "checkpoint",
               exported: "exported directory", tmp_path / "tuned": "fine-tuning run directory",
               tmp_path / "tuned" / "model": "fine-tuned export",
               tied_checkpoint: "Hugging Face directory (Qwen2, ESM)"}
    for source, kind in sources.items():
        assert find_source(source).name == kind
        loaded = find_source(source).load(source, SourceOptions())
        assert type(loaded) is LoadedModel and not loaded.network.training
        assert (loaded.task is not None) == kind.startswith("fine-tun")
        assert (loaded.generation_settings is not None) == kind.startswith("Hugging Face")
        assert load_source(source).kind == kind and load_source(source).source == str(source)
    tuned = Model.load(tmp_path / "tuned")
    assert tuned.task.trunk is tuned.network and tuned.task_info.task == "regression"
    torch.manual_seed(0)
    load_exported(tmp_path / "tuned" / "model")
    expected = torch.rand(3)
    torch.manual_seed(0)
    load_source(tmp_path / "tuned")  # the head's initial draw, overwritten, takes nothing from the caller's stream:
    assert torch.equal(torch.rand(3), expected)  # fine-tuning from a fine-tuned run draws its new head as it did


def test_a_load_finds_its_source_once(run_dir, monkeypatch):
    """`Model.load` and a job given a path (`as_loaded`) each ask the table of sources once."""
    found = []
    monkeypatch.setattr(loading, "find_source", lambda path: found.append(path) or find_source(path))
    Model.load(run_dir)
    assert found == [run_dir]
    loading.as_loaded(run_dir)
    assert found == [run_dir, run_dir]


@pytest.fixture
def unreadable_generation(tied_checkpoint, tmp_path) -> Path:
    """The tied checkpoint with a generation_config.json that is no JSON."""
    directory = Path(shutil.copytree(tied_checkpoint, tmp_path / "qwen"))
    (directory / "generation_config.json").write_text("{not json")
    return directory


def test_generation_settings_are_read_only_when_generation_is_asked_for(unreadable_generation, tied_checkpoint,
                                                                         tied):
    """Embedding and scoring never read generation_config.json: a damaged one does not stop them; generating reads
    it, at load `for_generation` (before a weight is read) or at the first generation, and refuses it naming it."""
    model = Model.load(unreadable_generation)
    vectors = model.embed(["The ribosome", "A cell"])
    assert np.array_equal(vectors, Model.load(tied_checkpoint).embed(["The ribosome", "A cell"]))
    assert model.score(["The ribosome"])["log_likelihood"].notna().all()
    with pytest.raises(CheckpointError, match="generation_config.json"):
        model.generate(["The ribosome"], max_new_tokens=2)
    with pytest.raises(CheckpointError, match="generation_config.json"):
        Model.load(unreadable_generation, for_generation=True)
    (unreadable_generation / "generation_config.json").unlink()  # absent: config.json's ids, as transformers reads
    absent = Model.load(unreadable_generation, for_generation=True).generation
    assert absent.eos_token_ids[0] == json.loads((tied_checkpoint / "config.json").read_text())["eos_token_id"]
    assert Model.load(tied_checkpoint, for_generation=True).generation == tied.defaults


def test_a_pad_id_outside_the_vocabulary_is_refused_at_the_first_generation_too(tied_checkpoint, tmp_path):
    directory = Path(shutil.copytree(tied_checkpoint, tmp_path / "qwen"))
    settings = json.loads((directory / "generation_config.json").read_text())
    (directory / "generation_config.json").write_text(json.dumps({**settings, "pad_token_id": 10 ** 6}))
    model = Model.load(directory)  # embedding needs no pad id of generation_config.json
    with pytest.raises(CheckpointError, match="pad_token_id=1000000 is outside the model's vocabulary"):
        model.decoding()


def test_load_pretrained_is_a_deprecated_alias_of_model_load(run_dir):
    """The one test of the alias kept for a release: it warns naming `biotf.Model.load`, returns that model's network
    and tokenizer, and still checks a tokenizer it is given against the weights'."""
    import biotf

    with pytest.warns(DeprecationWarning, match=r"use biotf\.Model\.load\(source\)"):
        model, tokenizer = biotf.load_pretrained(run_dir, tokenizer_options={"unknown": "to_unk"})
    loaded = Model.load(run_dir, tokenizer_options={"unknown": "to_unk"})
    assert tokenizer.fingerprint == loaded.tokenizer.fingerprint and not model.training
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.network.state_dict().values()))
    other = build_tokenizer({"kind": "protein", "rare_residues": "to_x"})
    with pytest.warns(DeprecationWarning), pytest.raises(CheckpointError, match="tokenizer mismatch"):
        biotf.load_pretrained(run_dir, tokenizer=other)
