"""Positional schemes do what their papers say."""

from __future__ import annotations

import math

import pytest
import torch

from biotf.model import Transformer, TransformerConfig
from biotf.errors import BiotfWarning, ConfigError
from biotf.model.positions import (alibi_slope_values, apply_rotary, build_positions, reading_length,
                                   rotary_for_blocks, sinusoidal_table)


def test_rope_scores_depend_only_on_the_relative_offset():
    config = TransformerConfig(d_model=64, n_heads=2, pos="rope", rope_theta=1e4)
    rope = build_positions(config)
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 1, 32, dtype=torch.float64), torch.randn(1, 1, 1, 32, dtype=torch.float64)

    def score(m: int, n: int) -> float:
        cos_m, sin_m = rope.rotary(torch.tensor([[m]]))
        cos_n, sin_n = rope.rotary(torch.tensor([[n]]))
        return (apply_rotary(q, cos_m, sin_m) * apply_rotary(k, cos_n, sin_n)).sum().item()

    for m, n in [(3, 1), (10, 2), (0, 5)]:
        reference = score(m, n)
        for shift in (1, 7, 100):
            assert score(m + shift, n + shift) == pytest.approx(reference, abs=1e-4)
    assert score(0, 0) == pytest.approx((q * k).sum().item())  # position 0 is no rotation
    assert abs(score(5, 1) - score(5, 2)) > 1e-3  # and the offset does matter


def test_rope_pairs_dimension_j_with_j_plus_half_like_hf():
    config = TransformerConfig(d_model=16, n_heads=2, pos="rope", rope_theta=100.0)
    cos, sin = build_positions(config).rotary(torch.tensor([[3]]))
    x = torch.arange(8, dtype=torch.float32).view(1, 1, 1, 8) + 1
    angle = 3 * 100.0 ** (-torch.arange(0, 8, 2) / 8)  # theta^(-2i/d) for the 4 pairs
    x1, x2 = x[..., :4], x[..., 4:]
    expected = torch.cat([x1 * angle.cos() - x2 * angle.sin(), x2 * angle.cos() + x1 * angle.sin()], dim=-1)
    torch.testing.assert_close(apply_rotary(x, cos, sin), expected)


def test_rope_offset_slices_the_same_tables_it_gathers():
    rope = build_positions(TransformerConfig(d_model=16, n_heads=2, pos="rope"))
    positions = torch.arange(300, 305)[None]  # past the first cached table (256 rows): the tables grow
    for sliced, gathered in zip(rope.rotary(positions, offset=300), rope.rotary(positions)):
        torch.testing.assert_close(sliced, gathered, rtol=0, atol=0)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-6), (torch.bfloat16, 2 ** -7)])
@pytest.mark.parametrize("offset", [None, 4])
def test_rotation_matrices_rotate_as_the_tables_do(dtype, tolerance, offset):
    """On the CPU, narrow heads are rotated by one (head_dim x head_dim) matrix per token: the same rotation as the
    tables' (bfloat16: within its rounding, one rounding instead of three), for gathered and offset positions."""
    rope = build_positions(TransformerConfig(d_model=64, n_heads=4, pos="rope"))
    positions = torch.tensor([[0, 1, 2, 3, 4], [2, 3, 4, 5, 6]])
    tables = rope.rotary(positions if offset is None else positions[:1], offset=offset)
    x = torch.randn(2, 5, 8, 16, generator=torch.Generator().manual_seed(0))
    (rotation,) = rotary_for_blocks(tables, dtype, batch=2, heads=8)
    assert rotation.shape == (10, 16, 16) and rotation.dtype == dtype
    expected = apply_rotary(x.double(), *(table.double() for table in tables))
    torch.testing.assert_close(apply_rotary(x.to(dtype), rotation).double(), expected, rtol=tolerance,
                               atol=tolerance * 4)


def test_wide_heads_keep_the_tables():
    """A head wider than twice the heads rotated together keeps the two tables (its matrices would outgrow the
    rotated tensor)."""
    rope = build_positions(TransformerConfig(d_model=64, n_heads=1, pos="rope"))
    tables = rotary_for_blocks(rope.rotary(torch.arange(5)[None], offset=0), torch.float32, batch=1, heads=2)
    assert [table.shape for table in tables] == [(1, 5, 1, 64)] * 2


def test_sinusoidal_values_match_vaswani_formula():
    d_model = 10
    table = sinusoidal_table(torch.arange(50), d_model)
    for position in (0, 1, 7, 49):
        for i in range(d_model // 2):
            angle = position / 10000 ** (2 * i / d_model)
            assert table[position, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[position, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_sinusoidal_table_is_transformers_marian_table_with_sines_and_cosines_interleaved():
    """biotf interleaves as the paper writes it (sin at 2i, cos at 2i + 1); Marian (like tensor2tensor) puts the sines
    in the first half and the cosines in the second: the same numbers, columns permuted."""
    marian = pytest.importorskip("transformers.models.marian.modeling_marian")
    d_model, rows = 64, 1024
    reference = marian.MarianSinusoidalPositionalEmbedding(rows, d_model).create_weight()
    table = sinusoidal_table(torch.arange(rows), d_model)
    half = d_model // 2
    assert (table[:, 0::2] - reference[:, :half]).abs().max() <= 1e-6
    assert (table[:, 1::2] - reference[:, half:]).abs().max() <= 1e-6
    assert (table - reference).abs().max() > 0.5  # the layouts differ: a table copied as is would be wrong


def test_sinusoidal_positions_are_added_to_the_embeddings():
    model = Transformer(TransformerConfig(d_model=16, n_heads=2, pos="sinusoidal", n_layers=1)).eval()
    ids = torch.tensor([[3, 3, 3]])
    embedded = model(ids, output_hidden_states=True).hidden_states[0]
    torch.testing.assert_close(embedded, model.embed(ids) + sinusoidal_table(torch.arange(3), 16))


def test_alibi_slopes_for_8_heads_are_2_to_the_minus_1_to_8():
    assert alibi_slope_values(8) == [2.0 ** -i for i in range(1, 9)]


def test_alibi_slopes_for_heads_not_a_power_of_two_follow_the_paper():
    # 6 heads: the 4-head slopes 2^-2, 2^-4, 2^-6, 2^-8, then every other 8-head slope: 2^-1, 2^-3.
    assert alibi_slope_values(6) == [2.0 ** -i for i in (2, 4, 6, 8, 1, 3)]
    torch.testing.assert_close(torch.tensor(alibi_slope_values(16)), torch.tensor([2.0 ** (-i / 2) for i in range(1, 17)]))


@pytest.mark.parametrize("causal", [True, False])
def test_alibi_bias_is_minus_slope_times_distance(causal):
    config = TransformerConfig(d_model=32, n_heads=8, pos="alibi", causal=causal)
    positions = torch.arange(5)[None]
    bias = build_positions(config).attention_bias(positions, positions, causal)
    assert bias.shape == (1, 8, 5, 5)
    distance = (positions[0, :, None] - positions[0, None, :]).float()
    distance = distance if causal else distance.abs()
    for head, slope in enumerate(alibi_slope_values(8)):
        visible = torch.ones(5, 5, dtype=torch.bool).tril() if causal else torch.ones(5, 5, dtype=torch.bool)
        torch.testing.assert_close(bias[0, head][visible], (-slope * distance)[visible])


def test_learned_positions_are_a_trained_table():
    model = Transformer(TransformerConfig(d_model=16, n_heads=2, pos="learned", max_seq_len=12))
    assert model.positions.table.weight.shape == (12, 16)
    assert model.num_parameters() - model.num_parameters(exclude_embeddings=True) == (32 + 12) * 16


@pytest.mark.parametrize("pos", ["rope", "alibi", "sinusoidal", "none"])
def test_positions_that_extend_read_past_the_trained_length_with_a_warning(pos):
    config = TransformerConfig(vocab_size=10, d_model=16, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=32,
                               max_seq_len=64, pos=pos)
    assert reading_length(config, None) == 64 and reading_length(config, 64) == 64
    with pytest.warns(BiotfWarning, match=f"max_length=1000 reads past the 64 tokens .* pos={pos} extends"):
        assert reading_length(config, 1000) == 1000


def test_learned_positions_refuse_past_their_table_with_how_to_train_for_it():
    config = TransformerConfig(vocab_size=10, d_model=16, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=32,
                               max_seq_len=64, pos="learned")
    with pytest.raises(ConfigError, match=r"max_length=1000.*model.max_seq_len=1000, or with model.pos=alibi "
                                          r"or rope.*allowed: 1..64"):
        reading_length(config, 1000)
    unbounded = TransformerConfig(vocab_size=10, d_model=16, n_layers=1, n_heads=2, n_kv_heads=2, d_ff=32,
                                  max_seq_len=None, pos="alibi")
    assert reading_length(unbounded, 5000) == 5000
    with pytest.raises(ConfigError, match="no max_seq_len to default to"):
        reading_length(unbounded, None)
