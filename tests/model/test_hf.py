"""Qwen2 parity: biotf computes what transformers' Qwen2ForCausalLM computes, and writes checkpoints it loads."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
import torch

from biotf.errors import CheckpointError
from biotf.model import Transformer, TransformerConfig
from biotf.inference.fast import optimize_for_decoding
from biotf.inference.fast.layout import loaded_in_decode_layout

transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-4  # max abs difference of float32 logits


def random_qwen2(tied: bool, seed: int = 0, layers: int = 3):
    torch.manual_seed(seed)
    config = transformers.Qwen2Config(
        vocab_size=211, hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
        num_key_value_heads=2, rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=tied,
        max_position_embeddings=256)
    model = transformers.Qwen2ForCausalLM._from_config(config, attn_implementation="sdpa", dtype=torch.float32)
    with torch.no_grad():  # HF initialises biases to 0 and norm gains to 1: randomise them so that they are tested
        for name, parameter in model.named_parameters():
            if name.endswith(".bias") or "norm" in name:
                parameter.normal_(1.0 if "norm" in name else 0.0, 0.2)
    return model.eval()


def batch(seed: int = 1):
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 211, (3, 19), generator=generator)
    mask = torch.ones_like(ids)
    mask[0, :6] = 0  # left padding, as for batched generation
    mask[1, :1] = 0
    return ids, mask


def max_diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    diff = (a - b).abs()
    if mask is not None:
        diff = diff * mask[..., None]
    return diff.max().item()


@pytest.mark.parametrize("tied", [True, False])
def test_logits_loss_and_hidden_states_match_qwen2(tied):
    hf = random_qwen2(tied)
    model = Transformer.from_hf(hf)
    assert model.config.tie_embeddings is tied and model.config.n_kv_heads == 2
    assert model.num_parameters() == hf.num_parameters()
    ids, _ = batch()
    with torch.no_grad():
        ours = model(ids, labels=ids, output_hidden_states=True)
        theirs = hf(ids, labels=ids, output_hidden_states=True)
    assert max_diff(ours.logits, theirs.logits) <= TOLERANCE
    assert abs(ours.loss.item() - theirs.loss.item()) <= TOLERANCE
    assert len(ours.hidden_states) == len(theirs.hidden_states)
    for mine, reference in zip(ours.hidden_states, theirs.hidden_states):
        assert max_diff(mine, reference) <= TOLERANCE


@pytest.mark.parametrize("tied", [True, False])
def test_left_padded_batch_with_attention_mask_matches_qwen2(tied):
    hf = random_qwen2(tied, seed=2)
    model = Transformer.from_hf(hf)
    ids, mask = batch()
    with torch.no_grad():
        ours = model(ids, attention_mask=mask).logits
        # HF gives padded batches position ids that count real tokens (as its generate() does); biotf does so itself.
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        theirs = hf(ids, attention_mask=mask, position_ids=positions).logits
        theirs_default = hf(ids, attention_mask=mask).logits  # arange positions: same result, RoPE is relative
    assert max_diff(ours, theirs, mask) <= TOLERANCE
    assert max_diff(ours, theirs_default, mask) <= TOLERANCE
    assert torch.isfinite(ours).all()


@pytest.mark.parametrize("tied", [True, False])
def test_from_directory_single_file_and_sharded(tmp_path, tied):
    hf = random_qwen2(tied, seed=3)
    ids, mask = batch(4)
    with torch.no_grad():
        reference = hf(ids, attention_mask=mask).logits
    single, sharded = tmp_path / "single", tmp_path / "sharded"
    hf.save_pretrained(single)
    hf.save_pretrained(sharded, max_shard_size="40KB")
    assert (sharded / "model.safetensors.index.json").is_file() and not (sharded / "model.safetensors").exists()
    for directory in (single, sharded):
        model = Transformer.from_hf(directory)
        with torch.no_grad():
            assert max_diff(model(ids, attention_mask=mask).logits, reference, mask) <= TOLERANCE
        model = Transformer.from_hf(str(directory))  # str paths too
        assert model.config.vocab_size == 211
        arranged = Transformer.from_hf(directory, materialise=loaded_in_decode_layout)  # transposed as they are read
        head = arranged.embed if tied else arranged.lm_head  # the matrix the LM head multiplies by
        assert arranged.blocks[0].mlp.gate_up.weight.t().is_contiguous() and head.weight.t().is_contiguous()
        assert arranged.final_norm.weight.is_contiguous() and arranged.embed.weight.is_contiguous() is not tied
        with torch.no_grad():
            assert max_diff(arranged(ids, attention_mask=mask).logits, reference, mask) <= TOLERANCE


@pytest.mark.parametrize("tied, arranged", [(True, False), (False, False), (True, True)])
def test_to_hf_round_trip_is_loaded_by_transformers_with_the_same_logits(tmp_path, tied, arranged):
    torch.manual_seed(5)
    model = Transformer(TransformerConfig.preset("tiny", tie_embeddings=tied, rope_theta=1e6)).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(".bias") or "norm" in name:
                parameter.normal_(1.0 if "norm" in name else 0.0, 0.2)
    if arranged:  # transposed strides (after optimize_for_decoding) are written in the usual layout
        optimize_for_decoding(model)
    model.to_hf(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == "qwen2"
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="sdpa").eval()
    assert type(hf).__name__ == "Qwen2ForCausalLM"
    ids = torch.randint(0, 64, (2, 11))
    with torch.no_grad():
        assert max_diff(model(ids).logits, hf(ids).logits) <= TOLERANCE
    again = Transformer.from_hf(tmp_path)
    assert again.config == model.config
    for (name, ours), (_, theirs) in zip(model.state_dict().items(), again.state_dict().items()):
        assert torch.equal(ours, theirs), name


def test_to_hf_without_qkv_bias_writes_zero_biases(tmp_path):
    model = Transformer(TransformerConfig.preset("tiny", qkv_bias=False)).eval()
    model.to_hf(tmp_path)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = torch.randint(0, 64, (2, 11))
    with torch.no_grad():
        assert max_diff(model(ids).logits, hf(ids).logits) <= TOLERANCE


def test_to_hf_refuses_configs_qwen2_cannot_express(tmp_path):
    with pytest.raises(CheckpointError, match="norm='layernorm'"):
        Transformer(TransformerConfig.preset("tiny", norm="layernorm")).to_hf(tmp_path)
    with pytest.raises(CheckpointError, match="causal=False"):
        Transformer(TransformerConfig.preset("tiny", causal=False)).to_hf(tmp_path)
    with pytest.raises(CheckpointError, match="cannot write model_type 'gpt-neo'.*it writes: qwen2"):
        Transformer(TransformerConfig.preset("tiny")).to_hf(tmp_path, model_type="gpt-neo")


def test_unsupported_checkpoints_are_refused_clearly(tmp_path):
    with pytest.raises(CheckpointError, match="not a directory"):
        Transformer.from_hf(tmp_path / "missing")
    with pytest.raises(CheckpointError, match="no config.json"):
        Transformer.from_hf(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "xlnet"}))
    with pytest.raises(CheckpointError, match="model_type 'xlnet' is not supported"):
        Transformer.from_hf(tmp_path)
    hf = random_qwen2(True, layers=1)
    hf.config.save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="no model.safetensors or model.safetensors.index.json, nor a "
                                              "pytorch_model.bin"):
        Transformer.from_hf(tmp_path)
    torch.save({"model.norm.weight": Fraction(1, 3)}, tmp_path / "pytorch_model.bin")  # a pickled non-tensor object
    with pytest.raises(CheckpointError, match="cannot read .*pytorch_model.bin as plain tensors"):
        Transformer.from_hf(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["use_sliding_window"] = True
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="sliding"):
        Transformer.from_hf(tmp_path)


def test_a_bfloat16_checkpoint_with_stored_rotary_frequencies_loads_as_stored(tmp_path):
    # As a real checkpoint may be: weights in bfloat16 (as Qwen2.5 ships) and inverse frequencies stored by a model
    # that held them in bfloat16. The checkpoint's values win over recomputation from rope_theta; transformers itself
    # recomputes, so the reference is HF with its frequencies set to the stored ones.
    source = random_qwen2(tied=False, seed=6)
    with torch.no_grad():  # sharp attention, as in a trained model, so that positions matter
        for name, parameter in source.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                parameter.normal_(0.0, 0.5)
    stored = source.model.rotary_emb.inv_freq.to(torch.bfloat16)
    source.to(torch.bfloat16).save_pretrained(tmp_path)
    from safetensors.torch import load_file, save_file

    weights = load_file(tmp_path / "model.safetensors")
    assert {t.dtype for t in weights.values()} == {torch.bfloat16}
    save_file({**weights, "model.rotary_emb.inv_freq": stored}, tmp_path / "model.safetensors", metadata={"format": "pt"})

    reference = transformers.Qwen2ForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    recomputed = reference.model.rotary_emb.inv_freq.clone()
    model = Transformer.from_hf(tmp_path)
    for dtype in (torch.float32, torch.bfloat16):  # the frequencies stay float32 whatever the weights' dtype
        loaded = model if dtype == torch.float32 else Transformer.from_hf(tmp_path, dtype=dtype)
        assert loaded.positions.inverse_frequency.dtype == torch.float32
        assert torch.equal(loaded.positions.inverse_frequency, stored.float())
    ids = torch.randint(0, 211, (2, 200), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ours = model(ids).logits
        reference.model.rotary_emb.inv_freq.copy_(stored.float())
        theirs = reference(ids).logits
        reference.model.rotary_emb.inv_freq.copy_(recomputed)
        theirs_recomputed = reference(ids).logits
    assert max_diff(ours, theirs) <= TOLERANCE
    assert max_diff(ours, theirs_recomputed) > 10 * TOLERANCE  # the stored values matter at these positions
    # Written back by to_hf (transformers ignores the tensor), read back by biotf.
    model.to_hf(tmp_path / "exported")
    assert torch.equal(Transformer.from_hf(tmp_path / "exported").positions.inverse_frequency, stored.float())
    # A model whose frequencies are rope_theta's writes none.
    Transformer.from_hf(random_qwen2(tied=True)).to_hf(tmp_path / "plain")
    assert "model.rotary_emb.inv_freq" not in load_file(tmp_path / "plain" / "model.safetensors")
