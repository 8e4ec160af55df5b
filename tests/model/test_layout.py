"""Decoding layout (`layout.py`) and streamed-weight products (`linear.py`): strides and speed change, values only
by rounding."""

from __future__ import annotations

import pytest
import torch

from biotf.model import Transformer, TransformerConfig, layout
from biotf.model import linear as linear_module
from biotf.model.layout import arrange_for_decoding, decode_layout, decode_matrix_names


def is_transposed(tensor: torch.Tensor) -> bool:
    return tensor.t().is_contiguous() and not tensor.is_contiguous()


def tiny(tied: bool) -> Transformer:
    torch.manual_seed(0)
    return Transformer(TransformerConfig(vocab_size=97, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48,
                                         pos="rope", norm="rmsnorm", mlp="swiglu", qkv_bias=True, bias=False,
                                         tie_embeddings=tied, causal=True, max_seq_len=64))


def test_float32_cpu_matrices_are_stored_transposed_once():
    weight = torch.randn(6, 4)
    arranged = decode_layout(weight)
    assert arranged.shape == (6, 4) and is_transposed(arranged) and torch.equal(arranged, weight)
    assert decode_layout(arranged) is arranged  # already there: no copy


def test_bfloat16_stays_row_major_and_dtype_converts_in_the_same_call():
    transposed = torch.randn(4, 6).t()
    assert decode_layout(transposed, torch.bfloat16).is_contiguous()
    converted = decode_layout(torch.randn(6, 4, dtype=torch.bfloat16), torch.float32)
    assert converted.dtype == torch.float32 and is_transposed(converted)


@pytest.mark.parametrize("tied", [True, False])
def test_arranging_changes_strides_not_values(tied):
    model = tiny(tied).eval()
    ids = torch.randint(0, 97, (2, 9))
    with torch.no_grad():
        before = model(ids).logits
    parameters = dict(model.named_parameters())
    identities = {name: id(p) for name, p in parameters.items()}
    arrange_for_decoding(model)
    names = decode_matrix_names(model)
    assert ("embed.weight" in names) is tied and "blocks.0.attn.qkv.weight" in names
    for name, parameter in model.named_parameters():
        assert id(parameter) == identities[name]
        assert is_transposed(parameter) if name in names else parameter.is_contiguous(), name
    pointers = [p.data_ptr() for p in model.parameters()]
    arrange_for_decoding(model)
    assert [p.data_ptr() for p in model.parameters()] == pointers  # idempotent, no copies
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, before, rtol=0, atol=1e-5)  # summation order only


def test_model_arranged_under_inference_mode_still_trains_and_moves_back_for_bfloat16():
    model = tiny(tied=True)
    with torch.inference_mode():  # as generate_ids calls it
        arrange_for_decoding(model)
    assert not any(p.is_inference() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = torch.randint(0, 97, (2, 9))
    first = model(ids, labels=ids).loss
    first.backward()
    assert model.embed.weight.grad is not None and model.blocks[0].attn.qkv.weight.grad.shape == (64, 32)
    optimizer.step()
    assert model(ids, labels=ids).loss.item() < first.item()
    arrange_for_decoding(model.to(torch.bfloat16))
    assert all(p.is_contiguous() for p in model.parameters())


@pytest.fixture
def two_threads():
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("rows, bias, path", [(1, True, "bmm"), (3, False, "bmm"), (17, True, "addmm"),
                                             (linear_module.WEIGHT_FIRST_MAX_ROWS, False, "mm")])
def test_streamed_products_equal_f_linear(two_threads, monkeypatch, rows, bias, path):
    """Few rows are split over the threads (bmm); a short prompt's rows go weight-first (mm / addmm)."""
    calls = []
    for name in ("bmm", "mm", "addmm"):
        original = getattr(torch.ops.aten, name)
        monkeypatch.setattr(linear_module.torch, name,
                            lambda *a, _name=name, _original=original: calls.append(_name) or _original(*a))
    weight = decode_layout(torch.randn(4096, 300))
    b = torch.randn(4096) if bias else None
    x = torch.randn(rows, 1, 300) / 300 ** 0.5  # outputs of order 1
    with torch.inference_mode():
        streamed = linear_module.linear(x, weight, b, weights_streamed=True)
    assert calls == [path]
    # the same dot products, perhaps summed in another order: float32 rounding only
    torch.testing.assert_close(streamed, torch.nn.functional.linear(x, weight, b), rtol=0, atol=1e-5)
    assert streamed.shape == (rows, 1, 4096)


def test_streamed_products_are_left_to_f_linear_where_nothing_pays(two_threads, monkeypatch):
    calls = []
    for name in ("bmm", "mm", "addmm"):
        monkeypatch.setattr(linear_module.torch, name, lambda *a: calls.append(1))
    transposed = decode_layout(torch.randn(64, 48))
    x = torch.randn(1, 48)
    linear_module.linear(x.requires_grad_(), transposed, weights_streamed=True)  # gradients needed
    with torch.inference_mode():
        long_input = torch.randn(linear_module.WEIGHT_FIRST_MAX_ROWS + 1, 48)
        linear_module.linear(long_input, transposed, weights_streamed=True)  # long prompts, training batches
        linear_module.linear(torch.randn(1, 48), transposed.contiguous(), weights_streamed=True)  # row-major
        linear_module.linear(torch.randn(1, 47), decode_layout(torch.randn(64, 47)), weights_streamed=True)  # odd
        linear_module.linear(torch.randn(1, 48), transposed)  # not streamed
    assert not calls


def test_weights_count_as_streamed_only_when_they_outgrow_the_cache(monkeypatch):
    model = tiny(tied=True)
    arrange_for_decoding(model)
    assert not model.weights_streamed and not model.blocks[0].mlp.gate_up.weights_streamed  # a few kB: cache-resident
    monkeypatch.setattr(layout, "last_level_cache_bytes", lambda: 1024)
    arrange_for_decoding(model)
    linears = [m for m in model.modules() if isinstance(m, linear_module.Linear)]
    assert model.weights_streamed and all(m.weights_streamed for m in linears)


def test_a_streamed_model_prefills_and_decodes_as_before(two_threads, monkeypatch):
    """Through the whole model: a padded batch's prefill (weight-first products, transposed outputs) and the
    decoding step after it (split products) give the logits of the plain layout."""
    model = tiny(tied=True)
    ids = torch.randint(0, 97, (3, 40))
    mask = torch.ones_like(ids)
    mask[0, :5] = 0
    step, step_mask = torch.randint(0, 97, (3, 1)), torch.cat([mask, torch.ones(3, 1, dtype=torch.long)], dim=1)
    with torch.inference_mode():
        plain = model(ids, attention_mask=mask, use_cache=True)
        plain_step = model(step, attention_mask=step_mask, past_key_values=plain.past_key_values).logits
        monkeypatch.setattr(layout, "last_level_cache_bytes", lambda: 1024)
        arrange_for_decoding(model)
        assert model.weights_streamed
        streamed = model(ids, attention_mask=mask, use_cache=True)
        streamed_step = model(step, attention_mask=step_mask, past_key_values=streamed.past_key_values).logits
    torch.testing.assert_close(streamed.logits, plain.logits, rtol=0, atol=1e-5)
    torch.testing.assert_close(streamed_step, plain_step, rtol=0, atol=1e-5)
