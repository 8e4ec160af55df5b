"""Decoding's fast path (`biotf.inference.fast`): layout, streamed-weight products and the last-position
prefill change strides and speed, values only by rounding; the model itself stays a plain Transformer."""

from __future__ import annotations

import pytest
import torch

from biotf.inference.fast import DecodingModel, StreamedLinear, optimize_for_decoding
from biotf.inference.fast import layout
from biotf.inference.fast import linear as linear_module
from biotf.inference.fast.layout import arrange_for_decoding, decode_layout, decode_matrix_names
from biotf.errors import ConfigError
from biotf.model import KVCache, Transformer, TransformerConfig


def is_transposed(tensor: torch.Tensor) -> bool:
    return tensor.t().is_contiguous() and not tensor.is_contiguous()


def tiny(tied: bool, **changes) -> Transformer:
    torch.manual_seed(0)
    fields = dict(vocab_size=97, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48, pos="rope", norm="rmsnorm",
                  mlp="swiglu", qkv_bias=True, bias=False, tie_embeddings=tied, causal=True, max_seq_len=64)
    return Transformer(TransformerConfig(**{**fields, **changes}))


def test_float32_cpu_matrices_are_stored_transposed_once():
    weight = torch.randn(6, 4)
    arranged = decode_layout(weight)
    assert arranged.shape == (6, 4) and is_transposed(arranged) and torch.equal(arranged, weight)
    assert decode_layout(arranged) is arranged  # already there: no copy


def test_bfloat16_stays_row_major():
    transposed = torch.randn(4, 6, dtype=torch.bfloat16).t()
    assert decode_layout(transposed).is_contiguous() and torch.equal(decode_layout(transposed), transposed)
    assert decode_layout(transposed.contiguous()) is not transposed


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
    with torch.inference_mode():
        optimize_for_decoding(model)
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
        streamed = linear_module.streamed_linear(x, weight, b)
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
    linear_module.streamed_linear(x.requires_grad_(), transposed)  # gradients needed
    with torch.inference_mode():
        long_input = torch.randn(linear_module.WEIGHT_FIRST_MAX_ROWS + 1, 48)
        linear_module.streamed_linear(long_input, transposed)  # long prompts, training batches
        linear_module.streamed_linear(torch.randn(1, 48), transposed.contiguous())  # row-major
        linear_module.streamed_linear(torch.randn(1, 47), decode_layout(torch.randn(64, 47)))  # odd input size
    assert not calls


def test_linear_layers_become_streamed_only_when_the_weights_outgrow_the_cache(monkeypatch):
    model = tiny(tied=True)
    keys = list(model.state_dict())
    decoder = optimize_for_decoding(model)
    assert isinstance(decoder, DecodingModel) and decoder.model is model
    assert not decoder.streamed_head and not any(isinstance(m, StreamedLinear) for m in model.modules())  # a few kB
    monkeypatch.setattr(layout, "last_level_cache_bytes", lambda: 1024)
    decoder = optimize_for_decoding(decoder)  # again (a decoder is accepted too): now they stream
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert decoder.streamed_head and linears and all(type(m) is StreamedLinear for m in linears)
    assert list(model.state_dict()) == keys  # the same Parameters under the same names


@pytest.mark.parametrize("norm_position", ["pre", "post"])
def test_decoding_model_gives_the_last_position_logits_and_cache_of_the_full_forward(norm_position):
    """The last block's MLP, the final norm and the head run for the last position alone; the logits, the KV cache
    and the next decoding step are those of the plain model, padded batches included."""
    model = tiny(tied=False, norm_position=norm_position).eval()
    decoder = DecodingModel(model)  # plain wrap: the model is not changed
    ids = torch.randint(0, 97, (2, 7))
    mask = torch.ones_like(ids)
    mask[0, :2] = 0
    step, step_mask = torch.randint(0, 97, (2, 1)), torch.ones(2, 8, dtype=torch.long)
    step_mask[0, :2] = 0
    with torch.no_grad():
        full = model(ids, attention_mask=mask, use_cache=True)
        cache = KVCache(model.config.n_layers)
        torch.testing.assert_close(decoder(ids, mask, cache), full.logits[:, -1])
        after_full = model(step, attention_mask=step_mask, past_key_values=full.past_key_values).logits[:, -1]
        torch.testing.assert_close(decoder(step, step_mask, cache), after_full)
    assert all(p.is_contiguous() for p in model.parameters())


def test_decoding_needs_a_causal_model():
    with pytest.raises(ConfigError, match="causal"):
        DecodingModel(tiny(tied=True, causal=False))


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
        decoder = optimize_for_decoding(model)
        assert decoder.streamed_head
        streamed = model(ids, attention_mask=mask, use_cache=True)
        streamed_step = model(step, attention_mask=step_mask, past_key_values=streamed.past_key_values).logits
        cache = KVCache(model.config.n_layers)
        decoded, decoded_step = decoder(ids, mask, cache), decoder(step, step_mask, cache)
    torch.testing.assert_close(streamed.logits, plain.logits, rtol=0, atol=1e-5)
    torch.testing.assert_close(streamed_step, plain_step, rtol=0, atol=1e-5)
    torch.testing.assert_close(decoded, plain.logits[:, -1], rtol=0, atol=1e-5)
    torch.testing.assert_close(decoded_step, plain_step[:, -1], rtol=0, atol=1e-5)


# --- the decoding plan: measured per machine, every plan gives the same values -----------------------------------
import biotf.inference.fast as fast  # noqa: E402
from biotf.inference.fast import plan as plan_module  # noqa: E402

DECODE_TIMES = {"1 row row-major": 100.0, "1 row transposed": 50.0, "1 row split": 30.0,
                "prefill row-major": 100.0, "prefill transposed": 120.0, "prefill weight-first": 80.0}


@pytest.mark.parametrize("dtype, changes, expected", [
    (torch.float32, {}, (True, True, True)),  # the EPYC the fast path was tuned on: every choice pays
    (torch.float32, {"1 row split": 48.0}, (True, True, True)),  # a tuned choice stays within the margin
    (torch.float32, {"1 row split": 60.0}, (True, False, True)),  # ... and goes when beaten by it
    (torch.float32, {"prefill weight-first": 140.0}, (True, True, False)),
    (torch.float32, {"1 row row-major": 20.0}, (False, False, False)),  # a CPU whose BLAS streams row-major best
    (torch.bfloat16, {"1 row transposed": 95.0, "1 row split": 92.0}, (False, False, False)),  # new: needs the margin
    (torch.bfloat16, {}, (True, True, True)),  # ... and is taken with it
])
def test_the_plan_flips_a_choice_only_where_measured_faster_by_the_margin(dtype, changes, expected):
    plan = plan_module.choose(dtype, {**DECODE_TIMES, **changes}, "test")
    assert (plan.transposed, plan.split, plan.weight_first) == expected


def test_without_threads_to_split_over_the_plan_never_splits():
    timings = {name: value for name, value in DECODE_TIMES.items() if name != "1 row split"}
    assert plan_module.choose(torch.float32, timings, "test").split is False
    assert plan_module.choose(torch.bfloat16, timings, "test").split is False


def test_a_measured_plan_times_every_candidate_and_says_what_it_chose(two_threads):
    plan = plan_module.measured_plan(torch.float32, 256, 128, 2**20, 2)
    assert set(plan.timings) == set(DECODE_TIMES) and all(t > 0 for t in plan.timings.values())
    assert "measured on 8 matrices of 256x128" in plan.how
    line = plan.describe()
    assert line.startswith("decoding plan (float32, 2 threads, ") and "matrices " in line
    assert plan_module.cpu_description().split(",")[0] in line


def test_a_measured_plan_fits_its_matrices_in_the_bytes_it_is_given(two_threads):
    assert "measured on 7 matrices of 256x128" in plan_module.measured_plan(torch.float32, 256, 128, 2**20 - 1, 2).how


@pytest.mark.parametrize("model_bytes", [2**20, 700 * 2**20, 8 * 2**30])
def test_the_plan_times_no_more_than_the_model_nor_than_the_cache_asks(monkeypatch, model_bytes):
    """Its two sets of matrices (row-major, transposed) together hold at most the model's decode matrices, and each at
    most CACHE_MULTIPLE x the last-level cache (a 300 MiB one sized them past a small model's weights)."""
    asked = {}
    monkeypatch.setenv("BIOTF_DECODE_PLAN", "measure")
    monkeypatch.setattr(plan_module, "last_level_cache_bytes", lambda: 300 * 2**20)
    monkeypatch.setattr(plan_module, "measured_plan", lambda dtype, out, inner, measured, threads: asked.update(
        out=out, inner=inner, measured=measured))
    plan_module.decode_plan(torch.float32, torch.device("cpu"), 151936, 896, model_bytes)
    assert asked["measured"] <= min(model_bytes // 2, plan_module.CACHE_MULTIPLE * 300 * 2**20)
    assert 2 * asked["out"] * asked["inner"] * 4 <= asked["measured"]  # one matrix at most half a set


def test_the_plan_mode_is_checked_and_fixed_means_the_tuned_choices(monkeypatch):
    monkeypatch.setenv("BIOTF_DECODE_PLAN", "fast")
    with pytest.raises(ConfigError, match="BIOTF_DECODE_PLAN.*measure \\| fixed"):
        plan_module.decode_plan(torch.float32, torch.device("cpu"), 8, 8, 256)
    monkeypatch.setenv("BIOTF_DECODE_PLAN", "fixed")
    fixed = plan_module.decode_plan(torch.float32, torch.device("cpu"), 8, 8, 256)
    assert (fixed.transposed, fixed.split, fixed.weight_first, fixed.timings) == (True, True, True, {})
    bf16 = plan_module.decode_plan(torch.bfloat16, torch.device("cpu"), 8, 8, 256)
    assert not (bf16.transposed or bf16.split or bf16.weight_first)


@pytest.mark.parametrize("transposed, split, weight_first", [(False, False, False), (True, False, False),
                                                             (True, True, False), (True, False, True)])
def test_every_plan_prefills_and_decodes_to_the_same_logits(two_threads, monkeypatch, transposed, split, weight_first):
    """Whatever this machine measures, the decoder computes the same values (float32 rounding only)."""
    model = tiny(tied=True)
    ids = torch.randint(0, 97, (3, 40))
    step = torch.randint(0, 97, (3, 1))
    with torch.inference_mode():
        cache = KVCache(model.config.n_layers)
        plain = DecodingModel(model)(ids, None, cache), DecodingModel(model)(step, None, cache)
        chosen = plan_module.DecodePlan(torch.float32, transposed, split, weight_first, "test")
        monkeypatch.setattr(layout, "last_level_cache_bytes", lambda: 1024)
        monkeypatch.setattr(fast, "model_plan", lambda *_: chosen)
        decoder = optimize_for_decoding(model)
        assert decoder.plan is chosen and decoder.streamed_head is transposed
        assert all(is_transposed(p) is transposed for p in (model.embed.weight, model.blocks[0].mlp.down.weight))
        cache = KVCache(model.config.n_layers)
        fast_logits = decoder(ids, None, cache), decoder(step, None, cache)
    for got, expected in zip(fast_logits, plain):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)
