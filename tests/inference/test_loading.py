"""`find_source` and `Model.load`: the one loader table decides what a model source is, for generation too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from biotf.checkpoint import CHECKPOINT_KEY, checkpoint_payload, save_checkpoint
from biotf.errors import CheckpointError, ConfigError
from biotf.inference.pretrained import GenerationDefaults
from biotf.checkpoint.loading import find_source
from biotf.api import HF_SOURCE, Model
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
    assert find_source(tied_checkpoint).name == HF_SOURCE
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
