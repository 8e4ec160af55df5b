"""GPT-2, BLOOM, Llama and Mistral parity: biotf computes what transformers' model computes (every hidden state, padded
batches, greedy generation) and writes checkpoints transformers loads. One table of cases, one set of tests."""

from __future__ import annotations

import json
import zipfile
from typing import Any, NamedTuple

import pytest
import torch

from biotf.errors import CheckpointError
from biotf.inference.fast import layout, optimize_for_decoding
from biotf.inference.generation import generate_ids
from biotf.model import Transformer, TransformerConfig

transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-5  # max abs difference of float32 logits and hidden states
VOCAB = 211


class Case(NamedTuple):
    model_type: str
    config_class: str
    model_class: str
    settings: dict[str, Any]
    positions: bool  # the HF model takes position_ids (BLOOM derives ALiBi from the attention mask)


GPT2 = dict(n_embd=64, n_layer=3, n_head=4, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
            bos_token_id=None, eos_token_id=None)  # GPT2Config defaults name id 50256, beyond this vocabulary
LLAMA = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
             rope_theta=1e4, rms_norm_eps=1e-6, max_position_embeddings=64)
CASES = {
    "gpt2": Case("gpt2", "GPT2Config", "GPT2LMHeadModel", GPT2, True),
    "gpt2-untied-gelu": Case("gpt2", "GPT2Config", "GPT2LMHeadModel",
                             {**GPT2, "tie_word_embeddings": False, "activation_function": "gelu"}, True),
    # 6 heads: ALiBi slopes for a head count that is not a power of two
    "bloom": Case("bloom", "BloomConfig", "BloomForCausalLM", dict(hidden_size=96, n_layer=3, n_head=6), False),
    "llama-biases": Case("llama", "LlamaConfig", "LlamaForCausalLM",
                         {**LLAMA, "attention_bias": True, "mlp_bias": True, "tie_word_embeddings": False}, True),
    "llama": Case("llama", "LlamaConfig", "LlamaForCausalLM", {**LLAMA, "tie_word_embeddings": True}, True),
    # a window of 5 positions: every sequence below is longer
    "mistral": Case("mistral", "MistralConfig", "MistralForCausalLM", {**LLAMA, "sliding_window": 5}, True),
}


def random_model(case: Case, seed: int = 0, std: float = 0.02):
    """A tiny random HF model, weights of standard deviation `std` (HF's initializer_range; 0.2 for generation, so
    that greedy decoding has no near-ties), biases and norm parameters (0 and 1 at HF's init) randomised so that they
    count."""
    torch.manual_seed(seed)
    config = getattr(transformers, case.config_class)(vocab_size=VOCAB, initializer_range=std, **case.settings)
    model = getattr(transformers, case.model_class)._from_config(config, dtype=torch.float32)  # sdpa where it has it
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(".bias") or "norm" in name or "ln_" in name:
                parameter.normal_(1.0 if name.endswith("weight") else 0.0, 0.2)
    return model.eval()


def left_padded(seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, VOCAB, (3, 17), generator=generator)
    mask = torch.ones_like(ids)
    mask[0, :6] = 0  # left padding, as for batched generation
    mask[1, :1] = 0
    return ids, mask


def generation_positions(mask: torch.Tensor) -> torch.Tensor:
    """The position ids transformers' `generate` passes: real tokens counted, pads at 0."""
    return (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)


def max_diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """Largest absolute difference, over real positions only when `mask` is given (padded rows are unspecified)."""
    if mask is not None:
        a, b = a[mask.bool()], b[mask.bool()]
    return (a - b).abs().max().item()


@pytest.fixture(params=list(CASES), scope="module")
def case(request) -> Case:
    return CASES[request.param]


def test_logits_loss_and_every_hidden_state_match_from_object_and_directory(case, tmp_path):
    hf = random_model(case)
    hf.save_pretrained(tmp_path)
    ids = torch.randint(0, VOCAB, (2, 13), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        theirs = hf(ids, labels=ids, output_hidden_states=True)
    for source in (hf, tmp_path):
        model = Transformer.from_hf(source)
        assert model.num_parameters() == hf.num_parameters()
        with torch.no_grad():
            ours = model(ids, labels=ids, output_hidden_states=True)
        assert max_diff(ours.logits, theirs.logits) <= TOLERANCE
        assert abs(ours.loss.item() - theirs.loss.item()) <= TOLERANCE
        assert len(ours.hidden_states) == len(theirs.hidden_states) == model.config.n_layers + 1
        for mine, reference in zip(ours.hidden_states, theirs.hidden_states):
            assert max_diff(mine, reference) <= TOLERANCE


@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy-pickle"])
def test_a_directory_with_only_pytorch_model_bin_loads_as_transformers_loads_it(case, tmp_path, zip_format):
    """The older hub layout: config.json and a pickled state dict (read with `torch.load(weights_only=True)`), in
    torch's zip format or the bare pickle of torch before 1.6; the logits and every hidden state those of the model
    `transformers` loads from the same directory."""
    hf = random_model(case, seed=3)
    hf.config.save_pretrained(tmp_path)
    torch.save(hf.state_dict(), tmp_path / "pytorch_model.bin", _use_new_zipfile_serialization=zip_format)
    assert zipfile.is_zipfile(tmp_path / "pytorch_model.bin") == zip_format
    assert sorted(path.name for path in tmp_path.iterdir()) == ["config.json", "pytorch_model.bin"]
    reference = getattr(transformers, case.model_class).from_pretrained(tmp_path).eval()
    ids = torch.randint(0, VOCAB, (2, 13), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ours = Transformer.from_hf(tmp_path)(ids, output_hidden_states=True)
        theirs = reference(ids, output_hidden_states=True)
    assert max_diff(ours.logits, theirs.logits) <= TOLERANCE
    for mine, expected in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        assert max_diff(mine, expected) <= TOLERANCE


def test_left_padded_batch_matches_the_generation_path(case):
    hf = random_model(case, seed=3)
    model = Transformer.from_hf(hf)
    ids, mask = left_padded()
    extra = {"position_ids": generation_positions(mask)} if case.positions else {}
    with torch.no_grad():
        ours = model(ids, attention_mask=mask, output_hidden_states=True)
        theirs = hf(ids, attention_mask=mask, output_hidden_states=True, **extra)
    assert torch.isfinite(ours.logits).all()
    assert max_diff(ours.logits, theirs.logits, mask) <= TOLERANCE
    for mine, reference in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        assert max_diff(mine, reference, mask) <= TOLERANCE
    if case.model_type == "gpt2":
        # HF's plain forward numbers a left-padded row's positions from its first pad, which moves learned
        # positions: biotf follows generate (above), so the two differ on padded rows.
        with torch.no_grad():
            plain = hf(ids, attention_mask=mask).logits
        assert max_diff(ours.logits[:2], plain[:2], mask[:2]) > 1e-2


def test_to_hf_writes_a_checkpoint_transformers_loads_with_the_same_logits(case, tmp_path):
    model = Transformer.from_hf(random_model(case, seed=4))
    model.to_hf(tmp_path, model_type=case.model_type)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == case.model_type
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(hf).__name__ == case.model_class
    ids, mask = left_padded(5)
    extra = {"position_ids": generation_positions(mask)} if case.positions else {}
    with torch.no_grad():
        assert max_diff(model(ids, attention_mask=mask).logits,
                        hf(ids, attention_mask=mask, **extra).logits, mask) <= TOLERANCE
    again = Transformer.from_hf(tmp_path)
    assert again.config == model.config
    for (name, ours), (_, theirs) in zip(model.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(ours, theirs), name


@pytest.mark.parametrize("fast", [False, True])
def test_greedy_generation_equals_transformers_generate(case, fast, monkeypatch):
    """Prompts of 3, 9 and 6 tokens in one left-padded batch, 10 new tokens each (Mistral's window of 5 is exceeded
    in prefill and in every decoding step). `fast`: through `optimize_for_decoding` with its matrices streamed
    (split products, as for a model larger than the cache)."""
    hf = random_model(case, seed=6, std=0.2)
    model = Transformer.from_hf(hf)
    if fast:
        monkeypatch.setattr(layout, "last_level_cache_bytes", lambda: 0)
        model = optimize_for_decoding(model)
        assert model.streamed_head
    generator = torch.Generator().manual_seed(7)
    prompts = [torch.randint(1, VOCAB, (n,), generator=generator).tolist() for n in (3, 9, 6)]
    ours = generate_ids(model, prompts, max_new_tokens=10, pad_token_id=0)
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    with torch.no_grad():
        theirs = hf.generate(ids, attention_mask=mask, max_new_tokens=10, do_sample=False, eos_token_id=None,
                             pad_token_id=0)[:, width:]
    assert ours == theirs.tolist()


@pytest.mark.parametrize("name, expected", [("gpt2", "gpt2"), ("bloom", "bloom"), ("mistral", "mistral"),
                                            ("llama-biases", "llama"), ("llama", "qwen2")])
def test_to_hf_without_a_model_type_writes_the_first_family_that_holds_the_model(tmp_path, name, expected):
    """A Llama without biases is also a Qwen2 with zero q/k/v biases, and Qwen2 comes first."""
    Transformer.from_hf(random_model(CASES[name])).to_hf(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == expected


@pytest.mark.parametrize("name, changes, field", [
    ("gpt2", {"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
    ("gpt2", {"activation_function": "quick_gelu"}, "activation_function"),
    ("gpt2", {"add_cross_attention": True}, "add_cross_attention"),
    ("bloom", {"apply_residual_connection_post_layernorm": True}, "apply_residual_connection_post_layernorm"),
    ("llama", {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}}, "rope_type"),
    ("llama", {"attention_bias": True, "mlp_bias": False}, "mlp_bias"),
    ("llama", {"head_dim": 32}, "head_dim"),
    ("mistral", {"hidden_act": "gelu"}, "hidden_act"),
])
def test_configs_the_transformer_cannot_express_are_refused_naming_the_field(tmp_path, name, changes, field):
    random_model(CASES[name]).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, **changes}))
    with pytest.raises(CheckpointError, match=f"config {field}=.* is not supported"):
        Transformer.from_hf(tmp_path)


@pytest.mark.parametrize("model_type, changes, field", [
    ("gpt2", {}, "pos='rope'"),
    ("gpt2", {"pos": "learned", "norm": "layernorm", "mlp": "gelu_tanh", "bias": True}, "n_kv_heads=2"),
    ("bloom", {"pos": "alibi", "norm": "layernorm", "mlp": "gelu_tanh", "bias": True, "embed_norm": True,
               "n_kv_heads": 4}, "d_ff=64"),
    ("llama", {}, "qkv_bias=True and bias=False"),
    ("mistral", {}, "qkv_bias=True"),
    ("qwen2", {"sliding_window": 8}, "sliding_window=8"),
    ("qwen2", {"embed_norm": True}, "embed_norm=True"),
])
def test_to_hf_refuses_configs_the_family_cannot_hold(tmp_path, model_type, changes, field):
    model = Transformer(TransformerConfig.preset("tiny", **changes))
    with pytest.raises(CheckpointError, match=f"cannot write a .* checkpoint: config {field}"):
        model.to_hf(tmp_path, model_type=model_type)


@pytest.mark.parametrize("name", ["gpt2", "bloom"])
def test_tensors_without_the_transformer_prefix_load_the_same(tmp_path, name):
    """openai-community/gpt2's and bigscience's BLOOM files name their tensors as the bare model does (`h.0...`, no
    `transformer.`, no tied lm_head) although config.json says *LMHeadModel / *ForCausalLM."""
    from safetensors.torch import load_file, save_file

    hf = random_model(CASES[name], seed=8)
    hf.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    bare = {key.removeprefix("transformer."): tensor for key, tensor in weights.items() if key != "lm_head.weight"}
    assert not any(key.startswith(("transformer.", "lm_head.")) for key in bare)
    save_file(bare, tmp_path / "model.safetensors", metadata={"format": "pt"})
    ids = torch.randint(0, VOCAB, (2, 9), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        assert max_diff(Transformer.from_hf(tmp_path)(ids).logits, hf(ids).logits) <= TOLERANCE
