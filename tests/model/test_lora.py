"""LoRA: starts as the base model, trains only A and B, leaves the trunk's weights unchanged, merges to the same
function, and its adapter saves and loads alone."""

from __future__ import annotations

import pytest
import torch

from biotf.errors import ConfigError, InputError
from biotf.model import Transformer, TransformerConfig
from biotf.model.lora import LoRALinear, adapter_state_dict, apply_lora, load_adapter, merge_lora, save_adapter


def build(mlp: str = "swiglu") -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=64,
                                         mlp=mlp, qkv_bias=True, bias=True, causal=False, init_std=0.1))


def train_adapter(model: Transformer, steps: int = 5) -> None:
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.1)
    for step in range(steps):
        ids = torch.randint(0, 40, (4, 10), generator=torch.Generator().manual_seed(step))
        model(ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def test_lora_starts_as_the_base_model_and_trains_only_the_adapter():
    model = build()
    ids = torch.randint(0, 40, (2, 9))
    with torch.no_grad():
        before = model(ids).logits
    trunk = {k: v.clone() for k, v in model.state_dict().items()}
    trainable = apply_lora(model, ["qkv", "out", "gate_up", "down"], rank=4, alpha=8)
    # per block: qkv (32 -> 64), out (32 -> 32), gate_up (32 -> 128), down (64 -> 32): rank x (in + out) each
    assert trainable == 2 * 4 * ((32 + 64) + (32 + 32) + (32 + 128) + (64 + 32))
    assert {n.rsplit(".", 1)[-1] for n, p in model.named_parameters() if p.requires_grad} == {"lora_a", "lora_b"}
    assert set(trunk) <= set(model.state_dict())  # the trunk's keys are unchanged
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, before, rtol=0, atol=0)  # B = 0
    train_adapter(model)
    state = model.state_dict()
    for key, value in trunk.items():
        assert torch.equal(state[key], value), key
    with torch.no_grad():
        assert not torch.allclose(model(ids).logits, before, atol=1e-3)


def test_merged_model_computes_the_adapted_function():
    model = build(mlp="gelu")
    apply_lora(model, ["qkv", "up"], rank=2, alpha=4)
    train_adapter(model)
    ids = torch.randint(0, 40, (3, 8))
    with torch.no_grad():
        adapted = model(ids).logits
        assert merge_lora(model) == 4
        assert not any(isinstance(m, LoRALinear) for m in model.modules())
        torch.testing.assert_close(model(ids).logits, adapted, rtol=1e-5, atol=1e-5)


def test_adapter_saves_alone_and_loads_onto_the_base_model(tmp_path):
    model = build()
    apply_lora(model, ["qkv", "down"], rank=3, alpha=6)
    train_adapter(model)
    path = save_adapter(model, tmp_path / "adapter.safetensors")
    assert sorted(adapter_state_dict(model)) == sorted(
        k for k in model.state_dict() if k.endswith((".lora_a", ".lora_b")))
    from safetensors.torch import load_file

    assert set(load_file(str(path))) == set(adapter_state_dict(model))  # adapter tensors only, no trunk weight
    fresh = build()
    settings = load_adapter(fresh, path)
    assert settings == {"rank": 3, "alpha": 6, "targets": ["down", "qkv"]}
    ids = torch.randint(0, 40, (2, 11))
    with torch.no_grad():
        torch.testing.assert_close(fresh(ids).logits, model(ids).logits, rtol=0, atol=0)


def test_bad_targets_and_settings_are_refused():
    with pytest.raises(ConfigError, match="finetune.lora.targets.*swiglu MLPs have gate_up"):
        apply_lora(build(), ["up"], rank=2, alpha=2)
    with pytest.raises(ConfigError, match="finetune.lora.targets"):
        apply_lora(build(), ["q_proj"], rank=2, alpha=2)
    with pytest.raises(ConfigError, match="finetune.lora.rank"):
        apply_lora(build(), ["qkv"], rank=0, alpha=2)
    with pytest.raises(InputError, match="no LoRA adapter"):
        save_adapter(build(), "unused.safetensors")
