"""The embedding pipeline: batch invariance, order, pooling over content tokens only, long records, layers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from biotf.io.readers import Record
from biotf.errors import BiotfWarning, ConfigError, InputError
from biotf.export import embed as embed_module
from biotf.export.embed import Embedder, EmbedOptions, EmbedStats

RESIDUES = "ACDEFGHIKLMNPQRSTVWY"
LENGTHS = [5, 40, 3, 17, 22, 9, 60, 1, 12]  # max_seq_len 24 -> 22 content tokens per window: 40 and 60 are chunked


def records(lengths=LENGTHS) -> list[Record]:
    rng = np.random.default_rng(0)
    return [Record(f"r{i}", "".join(rng.choice(list(RESIDUES), n)), {}, i) for i, n in enumerate(lengths)]


def embed(model_and_tokenizer, items, **options):
    model, tokenizer = model_and_tokenizer
    stats = EmbedStats()
    return list(Embedder(model, tokenizer, EmbedOptions(**options)).embed(items, stats)), stats


@pytest.mark.parametrize("pool", ["mean", "max", "cls", "none"])
def test_batch_invariance_and_order(tiny_encoder, pool):
    items = records()
    together, stats = embed(tiny_encoder, items, pool=pool, layer="all", batch_tokens=100)
    assert [e.record.id for e in together] == [r.id for r in items]
    assert stats.records == len(items) and stats.chunked == 2 and stats.truncated == 0
    for item, batched in zip(items, together):
        (alone,), _ = embed(tiny_encoder, [item], pool=pool, layer="all")
        assert alone.vectors.shape == batched.vectors.shape
        np.testing.assert_allclose(batched.vectors, alone.vectors, rtol=0, atol=1e-5)


@pytest.mark.parametrize("pool", ["mean", "max", "cls", "none"])
def test_packed_rows_give_each_records_unpacked_vectors(tiny_encoder, pool):
    items = records(LENGTHS * 3)
    packed, stats = embed(tiny_encoder, items, pool=pool, layer="all", batch_tokens=100, packing=True)
    unpacked, _ = embed(tiny_encoder, items, pool=pool, layer="all", batch_tokens=100)
    assert [e.record.id for e in packed] == [r.id for r in items] and stats.chunked == 6
    for one, other in zip(packed, unpacked):
        np.testing.assert_allclose(one.vectors, other.vectors, rtol=0, atol=1e-5)
        if pool == "none":
            assert np.array_equal(one.positions, other.positions) and np.array_equal(one.token_ids, other.token_ids)


def test_packing_puts_several_windows_in_a_row(tiny_encoder):
    model, tokenizer = tiny_encoder
    embedder = Embedder(model, tokenizer, EmbedOptions(packing=True, batch_tokens=48))
    (block, contents), = embedder._blocks(records(), EmbedStats(), None)
    embedder._learn_specials(block[0], contents[0])
    pieces = [piece for slot, (record, content) in enumerate(zip(block, contents))
              for piece in embedder._pieces(slot, record, content, EmbedStats())]
    batches = list(embedder._batches(pieces))
    rows = [row for batch in batches for row in batch]
    assert sorted(id(p) for row in rows for p in row) == sorted(id(p) for p in pieces)
    assert all(sum(len(p.ids) for p in row) <= 24 for row in rows) and len(rows) < len(pieces)
    assert all(len(batch) * 24 <= 48 for batch in batches)


def test_a_stem_model_refuses_packing_before_any_work():
    from biotf.model import Transformer, TransformerConfig
    from biotf.tokenizers import build_tokenizer

    tokenizer = build_tokenizer({"kind": "dna", "k": 1})
    model = Transformer(TransformerConfig(vocab_size=tokenizer.vocab_size, d_model=16, n_heads=2, causal=False,
                                          stem="conv"))
    with pytest.raises(ConfigError, match="^invalid config packing=True: the model has a convolutional stem") as caught:
        Embedder(model, tokenizer, EmbedOptions(packing=True))
    assert "\n" not in str(caught.value)


def test_blocks_do_not_change_results(tiny_encoder):
    small, _ = embed(tiny_encoder, records(), block_tokens=10)
    large, _ = embed(tiny_encoder, records())
    assert [e.record.id for e in small] == [e.record.id for e in large]
    np.testing.assert_allclose(np.stack([e.vectors for e in small]), np.stack([e.vectors for e in large]), atol=1e-5)


@pytest.mark.parametrize("pool", ["none", "mean"])
def test_blocks_hold_a_few_batches_of_vectors(tiny_encoder, pool):
    """A block's vectors wait for its last batch, so a block ends at BLOCK_BATCHES batches' worth of them
    (token rows for "none", two float32 rows per pooled record), however large `block_tokens` is."""
    model, tokenizer = tiny_encoder
    items = records([5, 40, 3, 17, 22, 9, 60, 1, 12] * 40)
    embedder = Embedder(model, tokenizer, EmbedOptions(pool=pool, batch_tokens=16))
    blocks = list(embedder._blocks(items, EmbedStats(), None))
    limit = embed_module.BLOCK_BATCHES * 16
    held = [[len(ids) if pool == "none" else 2 for ids in contents] for _, contents in blocks]
    assert len(blocks) > 1 and sum(len(block) for block, _ in blocks) == len(items)
    assert all(sum(rows[:-1]) < limit <= sum(rows) for rows in held[:-1])  # each ends at the first record over it
    assert sum(held[-1]) <= limit


def test_pooling_skips_special_tokens(tiny_encoder):
    model, tokenizer = tiny_encoder
    record = Record("masked", "ACD<mask>EFG", {}, 0)
    ids = tokenizer.encode(record.sequence)  # <cls> A C D <mask> E F G <eos>
    with torch.inference_mode():
        hidden = model(torch.tensor([ids]), output_hidden_states=True).hidden_states[-1][0].numpy()
    content = [i for i, token in enumerate(ids) if token not in tokenizer.special_ids]
    assert len(content) == 6
    (mean,), _ = embed(tiny_encoder, [record])
    (maximum,), _ = embed(tiny_encoder, [record], pool="max")
    (cls,), _ = embed(tiny_encoder, [record], pool="cls")
    (tokens,), _ = embed(tiny_encoder, [record], pool="none")
    np.testing.assert_allclose(mean.vectors[0], hidden[content].mean(0), atol=1e-6)
    np.testing.assert_allclose(maximum.vectors[0], hidden[content].max(0), atol=1e-6)
    np.testing.assert_allclose(cls.vectors[0], hidden[0], atol=1e-6)
    np.testing.assert_allclose(tokens.vectors[0], hidden[content], atol=1e-6)
    assert tokens.positions.tolist() == [0, 1, 2, 4, 5, 6]  # the <mask> is content position 3, left out
    assert tokens.token_ids.tolist() == [ids[i] for i in content]


def test_chunked_record_pools_each_token_once(tiny_encoder):
    item = records([60])
    (tokens,), stats = embed(tiny_encoder, item, pool="none")
    (mean,), _ = embed(tiny_encoder, item)
    assert stats.chunked == 1 and stats.windows == 4  # 22-token windows advancing by 17: starts 0, 17, 34, 38
    assert tokens.positions.tolist() == list(range(60))
    np.testing.assert_allclose(mean.vectors[0], tokens.vectors[0].mean(0), atol=1e-6)


def test_truncate_counts_and_error_names_the_record(tiny_encoder):
    (tokens,), stats = embed(tiny_encoder, records([40]), pool="none", long="truncate")
    assert stats.truncated == 1 and stats.truncated_tokens == 18 and tokens.positions.tolist() == list(range(22))
    with pytest.raises(InputError, match=r"record 'r1'.*40 tokens.*long='chunk'"):
        embed(tiny_encoder, records([3, 40]), long="error")


def test_layers(tiny_encoder):
    model, tokenizer = tiny_encoder
    every, _ = embed(tiny_encoder, records([7]), layer="all")
    last, _ = embed(tiny_encoder, records([7]))
    first, _ = embed(tiny_encoder, records([7]), layer=0)
    assert every[0].vectors.shape == (3, 16)
    np.testing.assert_array_equal(every[0].vectors[-1], last[0].vectors[0])
    np.testing.assert_array_equal(every[0].vectors[0], first[0].vectors[0])
    assert Embedder(model, tokenizer, EmbedOptions(layer="all")).array_names == ["layer_0", "layer_1", "embeddings"]
    with pytest.raises(ConfigError, match="layer"):
        Embedder(model, tokenizer, EmbedOptions(layer=3))


@pytest.mark.parametrize("options, key", [({"pool": "sum"}, "pool"), ({"long": "crop"}, "long"),
                                          ({"layer": "last"}, "layer"), ({"batch_tokens": 0}, "batch_tokens"),
                                          ({"pool": "none", "pool_specials": True}, "pool_specials"),
                                          ({"pool": "none", "normalize": True}, "normalize"),
                                          ({"normalize": 1}, "normalize")])
def test_bad_options(options, key):
    with pytest.raises(ConfigError, match=key):
        EmbedOptions(**options)


@pytest.mark.parametrize("pool", ["mean", "max"])
def test_pool_specials_counts_every_token_of_the_record_once_and_normalize_scales_to_one(tiny_encoder, pool):
    """sentence-transformers' pooling: <cls> and <eos> count too; over windows, the first window's prefix and the last
    one's suffix, each token once (the windows' overlaps are owned by one of them, as without specials)."""
    from biotf.data.windows import plan_windows

    model, tokenizer = tiny_encoder
    items = records([9, 40])  # one window, then three (22 content tokens each)

    def hidden(sequence: str) -> np.ndarray:
        with torch.no_grad():
            return model.encode(torch.tensor([tokenizer.encode(sequence)])).last_hidden_state[0].numpy()

    pooled, stats = embed(tiny_encoder, items, pool=pool, pool_specials=True)
    normalized, _ = embed(tiny_encoder, items, pool=pool, pool_specials=True, normalize=True)
    assert stats.chunked == 1
    whole = hidden(items[0].sequence)
    np.testing.assert_allclose(pooled[0].vectors[0], whole.mean(0) if pool == "mean" else whole.max(0), atol=1e-6)
    for plain, scaled in zip(pooled, normalized):
        np.testing.assert_allclose(scaled.vectors, plain.vectors / np.linalg.norm(plain.vectors, axis=-1,
                                                                                  keepdims=True), atol=1e-6)
    windows = plan_windows(40, 22, 22 // 4)
    first = hidden(items[1].sequence[windows[0].start:windows[0].end])[0]  # the first window's <cls>
    last = hidden(items[1].sequence[windows[-1].start:windows[-1].end])[-1]  # the last window's <eos>
    (content,), _ = embed(tiny_encoder, items[1:], pool=pool)
    if pool == "mean":
        expected = (content.vectors[0] * 40 + first + last) / 42
    else:
        expected = np.maximum.reduce([content.vectors[0], first, last])
    np.testing.assert_allclose(pooled[1].vectors[0], expected, atol=1e-5)


def test_model_limits_and_cls(tiny_encoder, monkeypatch):
    model, tokenizer = tiny_encoder
    with pytest.warns(BiotfWarning, match="max_length=25 reads past the 24 tokens"):  # RoPE extends
        assert Embedder(model, tokenizer, EmbedOptions(max_length=25)).max_length == 25
    with pytest.raises(ConfigError, match="max_length"):
        embed(tiny_encoder, records([3]), max_length=2)  # only room for <cls> and <eos>
    monkeypatch.setattr(tokenizer, "cls_id", None)
    with pytest.raises(ConfigError, match="no <cls> token"):
        Embedder(model, tokenizer, EmbedOptions(pool="cls"))


def test_a_stem_model_embeds_bases_each_carrying_its_bin(tmp_path):
    """With a conv stem the pipeline's tokens are bases: per-token output is one vector per base, the bases of one
    bin (counted from the record's <cls>) sharing it; pooling weighs each bin by its content bases; batch mates
    and padding change nothing (1e-5)."""
    from biotf.model import Transformer, TransformerConfig
    from biotf.tokenizers import build_tokenizer

    tokenizer = build_tokenizer({"kind": "dna", "k": 1})
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(**{**TINY_DNA_STEM, "vocab_size": tokenizer.vocab_size})).eval()
    rng = np.random.default_rng(1)
    items = [Record(f"d{i}", "".join(rng.choice(list("ACGT"), n)), {}, i) for i, n in enumerate([9, 30, 4, 17])]
    per_base, _ = embed((model, tokenizer), items, pool="none", batch_tokens=200)
    pooled, _ = embed((model, tokenizer), items, pool="mean", batch_tokens=200)
    for item, bases, mean in zip(items, per_base, pooled):
        ids = torch.tensor([tokenizer.encode(item.sequence, True)])
        with torch.no_grad():
            bins = model.encode(ids).last_hidden_state[0].numpy()
        expected = bins[np.arange(1, len(item.sequence) + 1) // 4]  # content token t (after <cls>) is in bin t // 4
        assert bases.vectors.shape == (1, len(item.sequence), 16)  # one layer (the last)
        np.testing.assert_allclose(bases.vectors[0], expected, rtol=0, atol=1e-5)
        np.testing.assert_allclose(mean.vectors[0], expected.mean(0), rtol=0, atol=1e-5)
        (alone,), _ = embed((model, tokenizer), [item], pool="none")
        np.testing.assert_allclose(bases.vectors, alone.vectors, rtol=0, atol=1e-5)


TINY_DNA_STEM = dict(d_model=16, n_layers=2, n_heads=2, d_ff=32, max_seq_len=64, causal=False, pos="rope",
                     norm="layernorm", mlp="gelu", stem="conv", stem_widths=[8, 16], stem_kernel=5, stem_pool=[2, 2])
