"""oneDNN's bf16 linears with the bias, the MLP's activation and the residual add fused: the same outputs as F.linear
(bf16 rounding apart), the same parameters, and undone exactly."""

from __future__ import annotations


import pytest
import torch
import torch.nn.functional as F
from torch import nn

from biotf.model import Transformer, TransformerConfig
from biotf.model import bf16_linear
from biotf.model.bf16_linear import Bf16Linear, fuse_linears
from biotf.model.mlp import ACTIVATIONS, FeedForward
from biotf.model.precision import put_back

pytestmark = pytest.mark.skipif(not bf16_linear.available(), reason="this PyTorch has no oneDNN linear")


@pytest.mark.parametrize("activation", [None, "gelu", "gelu_tanh", "relu"])
@pytest.mark.parametrize("bias", [True, False])
def test_the_fused_product_equals_f_linear_and_its_activation(activation, bias):
    torch.manual_seed(0)
    linear = nn.Linear(96, 160, bias=bias).to(torch.bfloat16)
    x = torch.randn(3, 50, 96, dtype=torch.bfloat16)
    fused = Bf16Linear(linear, activation)
    assert fused.weight is linear.weight and fused.bias is linear.bias
    with torch.inference_mode():
        got = fused(x).float()
        # the reference in float32 from the same bf16 numbers: both sides round once to bf16 at the end
        expected = F.linear(x.float(), linear.weight.float(), None if linear.bias is None else linear.bias.float())
        expected = expected if activation is None else ACTIVATIONS[activation](expected)
    assert got.shape == (3, 50, 160)
    # bf16 keeps 8 bits of mantissa: one rounding of values of magnitude <= ~4 is <= 2^-6
    torch.testing.assert_close(got, expected, atol=2 ** -5, rtol=2 ** -7)


@pytest.mark.parametrize("bias", [True, False])
def test_plus_adds_the_residual_inside_the_product(bias):
    """`plus` is residual + linear(x), rounded once in bf16, and it is the block's add on the fused path (a block's
    attention and MLP halves each run it once), while a plain linear or gradients take the sum as
    written."""
    torch.manual_seed(0)
    linear = nn.Linear(96, 48, bias=bias).to(torch.bfloat16)
    x, residual = torch.randn(3, 50, 96, dtype=torch.bfloat16), torch.randn(3, 50, 48, dtype=torch.bfloat16) * 4
    with torch.inference_mode():
        got = bf16_linear.plus(residual, Bf16Linear(linear), x).float()
        expected = residual.float() + F.linear(x.float(), linear.weight.float(),
                                               None if linear.bias is None else linear.bias.float())
        torch.testing.assert_close(got, expected, atol=2 ** -5, rtol=2 ** -7)
        assert torch.equal(bf16_linear.plus(residual, linear, x), residual + linear(x))
    config = TransformerConfig(vocab_size=33, d_model=64, n_heads=4, n_layers=2, d_ff=128, causal=False, pos="rope")
    model = Transformer(config).eval().to(torch.bfloat16)
    fuse_linears(model.blocks)

    def adds_inside(grad: bool) -> int:  # oneDNN linears given a residual: the binary form's five inputs
        with torch.profiler.profile(record_shapes=True) as profiled, torch.set_grad_enabled(grad):
            model(torch.randint(4, 29, (2, 9)))
        return sum(event.name == "mkldnn::_linear_pointwise" and len(event.input_shapes) == 5
                   for event in profiled.events())

    assert adds_inside(grad=False) == 2 * 2
    assert adds_inside(grad=True) == 0  # gradients asked for: F.linear, then the add


def test_with_gradients_it_runs_f_linear_so_training_still_works():
    torch.manual_seed(0)
    linear = nn.Linear(16, 8).to(torch.bfloat16)
    fused = Bf16Linear(linear, "gelu")
    x = torch.randn(4, 16, dtype=torch.bfloat16, requires_grad=True)
    fused(x).float().sum().backward()
    expected = x.detach().clone().requires_grad_()
    F.gelu(F.linear(expected, linear.weight, linear.bias)).float().sum().backward()
    torch.testing.assert_close(x.grad, expected.grad)


def test_a_fused_network_keeps_its_parameters_outputs_and_is_undone_exactly():
    torch.manual_seed(0)
    config = TransformerConfig(vocab_size=33, d_model=64, n_heads=4, n_layers=2, d_ff=128, max_seq_len=64,
                               causal=False, pos="rope", mlp="gelu")
    model = Transformer(config).eval().to(torch.bfloat16)
    keys = list(model.state_dict())
    ids = torch.randint(4, 29, (3, 40))
    with torch.inference_mode():
        plain = model(ids).logits.float()
    before = [type(module) for module in model.modules()]
    changed = fuse_linears(model.blocks)
    kinds = [type(module) for module in model.blocks.modules()]
    assert kinds.count(Bf16Linear) == 4 * 2 and nn.Linear not in kinds  # qkv, out, up and down of 2 blocks
    assert all(block.mlp.up.activation == "gelu" for block in model.blocks)
    assert list(model.state_dict()) == keys
    with torch.inference_mode():
        fused = model(ids).logits.float()
    # two bf16 roundings per linear differ in place: logits of a random 2-layer model move by bf16's few ulps
    torch.testing.assert_close(fused, plain, atol=0.05, rtol=0.02)
    put_back(changed)
    assert [type(module) for module in model.modules()] == before
    assert all(isinstance(block.mlp, FeedForward) and block.mlp.activation is ACTIVATIONS["gelu"]
               for block in model.blocks)
    with torch.inference_mode():
        torch.testing.assert_close(model(ids).logits.float(), plain, atol=0, rtol=0)


def test_the_bf16_conversion_fuses_only_on_x86_cpus_with_native_bf16():
    from biotf.model.precision import fused_bf16_linears

    assert fused_bf16_linears("cpu", flags={"amx_bf16"}) and fused_bf16_linears("cpu", flags={"avx512_bf16"})
    assert not fused_bf16_linears("cpu", flags={"avx2", "avx512f"})  # no native bf16: the products stay F.linear's
    assert not fused_bf16_linears("cpu", flags={"bf16"})  # ARM's flag: oneDNN's fused path is not measured there
    assert not fused_bf16_linears("cuda", flags={"amx_bf16"})
