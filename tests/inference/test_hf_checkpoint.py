"""Loading Hugging Face Qwen2 checkpoint directories: files, dtypes, generation defaults, clear refusals."""

from __future__ import annotations

import functools
import json
import shutil

import pytest
import torch

from biotf.api import Model
from biotf.errors import CheckpointError, ConfigError
from biotf.inference.fast import optimize_for_decoding
from biotf.inference.generation import generate_ids
from biotf.checkpoint.hf_directory import is_hf_directory
from biotf.inference.pretrained import GenerationDefaults

transformers = pytest.importorskip("transformers")


def copy_checkpoint(source, target):
    shutil.copytree(source, target)
    return target


def test_tied_and_untied_load_with_tokenizer_and_generation_defaults(tied, untied):
    for (model, tokenizer, defaults), tie in ((tied, True), (untied, False)):
        assert model.config.tie_embeddings is tie and (model.lm_head is None) is tie
        assert not model.training and model.embed.weight.dtype == torch.float32
        assert tokenizer.eos_id == 151645 and tokenizer.pad_id == 151643
        assert tokenizer.chat_template.startswith("{%- if tools %}")
        # Qwen2.5-Instruct's generation_config.json with do_sample false: greedy, its penalty, its eos ids, and its
        # bos <|endoftext|> to start an unprompted sample from (as transformers' generate without input ids)
        assert defaults == GenerationDefaults(eos_token_ids=(151645, 151643), pad_token_id=151643, temperature=0.0,
                                              top_k=20, top_p=0.8, repetition_penalty=1.1, start_token_id=151643)
        assert model.config.max_seq_len == 128


def test_sampling_defaults_follow_do_sample_and_fall_back_to_config_json(tied_checkpoint, tmp_path):
    sampled = GenerationDefaults.from_hf({"do_sample": True, "temperature": 0.7, "eos_token_id": 2,
                                          "max_new_tokens": 2048})
    assert (sampled.temperature, sampled.top_k, sampled.eos_token_ids, sampled.max_new_tokens) == (0.7, 50, (2,), 2048)
    directory = copy_checkpoint(tied_checkpoint, tmp_path / "model")
    (directory / "generation_config.json").unlink()
    defaults = Model.load(directory, for_generation=True).generation
    assert defaults.eos_token_ids == (151643, 151645)  # config.json's eos, then the tokenizer's
    assert defaults.temperature == 0.0 and defaults.repetition_penalty == 1.0


def test_sharded_checkpoint_and_bfloat16(tied, tied_checkpoint, tmp_path):
    model, tokenizer, _ = tied
    directory = tmp_path / "sharded"
    transformers.AutoModelForCausalLM.from_pretrained(tied_checkpoint).save_pretrained(directory, max_shard_size="2MB")
    tokenizer.save(directory)
    assert (directory / "model.safetensors.index.json").is_file() and not (directory / "model.safetensors").exists()
    sharded = Model.load(directory, for_generation=True).network
    # float32 matrices are read straight into their decoding layout (transposed), the tied embedding too
    assert sharded.blocks[0].attn.qkv.weight.t().is_contiguous() and sharded.embed.weight.t().is_contiguous()
    pointers = [p.data_ptr() for p in sharded.parameters()]
    decoder = optimize_for_decoding(sharded)
    assert [p.data_ptr() for p in sharded.parameters()] == pointers  # nothing left to copy
    ids = [tokenizer.encode("Sharded weights load too")]
    assert generate_ids(decoder, ids, max_new_tokens=8) == generate_ids(model, ids, max_new_tokens=8)
    half = Model.load(directory, dtype="bfloat16", for_generation=True).network
    assert {p.dtype for p in half.parameters()} == {torch.bfloat16}
    assert len(generate_ids(optimize_for_decoding(half), ids, max_new_tokens=4)) == 1
    assert all(p.is_contiguous() for p in half.parameters())  # bf16 decodes fastest row-major on CPUs
    with pytest.raises(ConfigError, match="allowed: float32, bfloat16"):
        Model.load(directory, dtype="float16", for_generation=True)


def test_other_architectures_and_missing_files_are_named(tied_checkpoint, tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        Model.load(tmp_path / "nowhere", for_generation=True)
    with pytest.raises(CheckpointError, match="cannot load a model from .*Hugging Face directory"):
        Model.load(tmp_path, for_generation=True)
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"model_type": "bert", "architectures": ["BertForMaskedLM"]}))
    with pytest.raises(CheckpointError, match=r"model_type 'bert'.*supported: qwen2 \(Qwen2ForCausalLM\)"):
        Model.load(bert, for_generation=True)
    classifier = copy_checkpoint(tied_checkpoint, tmp_path / "classifier")
    config = json.loads((classifier / "config.json").read_text())
    (classifier / "config.json").write_text(json.dumps({**config, "architectures": ["Qwen2ForSequenceClassification"]}))
    with pytest.raises(CheckpointError, match="Qwen2ForSequenceClassification.*not Qwen2ForCausalLM"):
        Model.load(classifier, for_generation=True)
    no_tokenizer = copy_checkpoint(tied_checkpoint, tmp_path / "no-tokenizer")
    (no_tokenizer / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match="no tokenizer.json"):
        Model.load(no_tokenizer, for_generation=True)
    no_weights = copy_checkpoint(tied_checkpoint, tmp_path / "no-weights")
    (no_weights / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="no model.safetensors or model.safetensors.index.json"):
        Model.load(no_weights, for_generation=True)
    assert is_hf_directory(tied_checkpoint) and is_hf_directory(bert) and not is_hf_directory(tmp_path)


def test_model_load_accepts_a_hugging_face_directory(tied_checkpoint, tied):
    loaded = Model.load(tied_checkpoint)
    model, tokenizer = loaded.network, loaded.tokenizer
    ids = [tokenizer.encode("Same weights")]
    assert tokenizer.fingerprint == tied.tokenizer.fingerprint
    assert generate_ids(model, ids, max_new_tokens=6) == generate_ids(tied.model, ids, max_new_tokens=6)


def test_the_decoding_plan_is_timed_before_any_weight_is_read(tied_checkpoint, monkeypatch):
    """Timed at the first matrix read, the plan's test matrices sat on top of every source tensor (a float32 load of
    a bf16 Qwen2.5-0.5B shape peaked at 2.4x its weights where the last-level cache is 300 MiB): they must come and go
    before the weights, once."""
    from biotf.inference.fast import plan as plan_module
    from biotf.model.hf.weights import SafetensorsWeights

    events = []
    stored = SafetensorsWeights.stored
    monkeypatch.setenv("BIOTF_DECODE_PLAN", "measure")
    monkeypatch.setattr(SafetensorsWeights, "stored", lambda self, name: events.append("weight") or stored(self, name))
    monkeypatch.setattr(plan_module, "measured_plan",  # cached per shape as the real one: the loader's is a hit
                        functools.cache(lambda dtype, *_: events.append("plan") or plan_module.fixed_plan(dtype)))
    Model.load(tied_checkpoint, for_generation=True)
    assert events[0] == "plan" and events.count("plan") == 1 and "weight" in events
