"""bf16 attention with gradients on the CPU runs in float32 where PyTorch's bf16 kernel is slow backwards
(`biotf.model.attention.upcast_for_backward`): its outputs and gradients are then exactly the float32 kernel's,
rounded once to bf16; inference and long keys keep the bf16 kernel."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from biotf.model import TransformerConfig
from biotf.model.attention import UPCAST_KEYS_BY_DIM, Attention, upcast_for_backward


def _qkv(keys: int, head_dim: int, dtype=torch.bfloat16, grad: bool = True) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(2, 2, keys, head_dim, generator=generator).to(dtype).requires_grad_(grad) for _ in range(3)]


def test_short_bf16_keys_with_gradients_get_the_float32_kernels_outputs_and_gradients():
    attention = Attention(TransformerConfig.preset("tiny", d_model=64, n_heads=2, n_kv_heads=2))
    q, k, v = _qkv(16, 32)
    upstream = torch.randn(2, 2, 16, 32, generator=torch.Generator().manual_seed(1)).bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = attention._sdpa(q, k, v, None, True)
    y.backward(upstream)
    reference = [t.detach().float().requires_grad_() for t in (q, k, v)]
    y32 = F.scaled_dot_product_attention(*reference, is_causal=True)
    y32.backward(upstream.float())
    assert y.dtype == torch.bfloat16 and torch.equal(y, y32.bfloat16())
    for ours, theirs in zip((q, k, v), reference):
        assert ours.grad.dtype == torch.bfloat16 and torch.equal(ours.grad, theirs.grad.bfloat16())


def test_inference_long_keys_and_float32_keep_their_kernel():
    q, k, _ = _qkv(16, 32)
    assert upcast_for_backward(q, k)
    with torch.no_grad():
        assert not upcast_for_backward(q, k)
    assert not upcast_for_backward(*_qkv(16, 32, grad=False)[:2])
    assert not upcast_for_backward(*_qkv(16, 32, dtype=torch.float32)[:2])
    long_q, long_k, _ = _qkv(UPCAST_KEYS_BY_DIM // 32 + 1, 32)
    assert not upcast_for_backward(long_q, long_k)
