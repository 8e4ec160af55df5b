"""RMSNorm's hand-written backward against autograd of the formula, and its paths (training, inference, bf16)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from biotf.model import TransformerConfig
from biotf.model.norms import RMSNorm, _RMSNormFunction


def test_rms_norm_backward_passes_gradcheck_in_float64():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(16, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: _RMSNormFunction.apply(a, b, 1e-6), (x, weight))


def test_rms_norm_training_path_matches_torch_rms_norm():
    """Value exactly, gradients of x and weight within float32 rounding (max abs <= 1e-5 at unit scale)."""
    torch.manual_seed(0)
    norm = RMSNorm(TransformerConfig(vocab_size=8, d_model=32, n_layers=1, n_heads=4, norm="rmsnorm"))
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(4, 7, 32, requires_grad=True)
    grad = torch.randn(4, 7, 32)
    ours = norm(x)
    assert ours.grad_fn is not None and "RMSNormFunction" in type(ours.grad_fn).__name__
    ours.backward(grad)
    expected_x, expected_weight = x.grad.clone(), norm.weight.grad.clone()
    x.grad = norm.weight.grad = None
    reference = F.rms_norm(x, (32,), norm.weight, norm.eps)
    reference.backward(grad)
    torch.testing.assert_close(ours, reference, rtol=0, atol=1e-6)
    torch.testing.assert_close(expected_x, x.grad, rtol=0, atol=1e-5)
    torch.testing.assert_close(expected_weight, norm.weight.grad, rtol=0, atol=1e-5)
    with torch.inference_mode():  # no graph: torch's own kernel, same values
        torch.testing.assert_close(norm(x), reference.detach(), rtol=0, atol=1e-6)
