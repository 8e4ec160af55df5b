"""Token-shard cache: exact contents, reuse, keys, corruption detection, atomic writes, streaming."""

from __future__ import annotations

import numpy as np
import pytest

from biotf.data.token_cache import file_digest, token_counts, tokenize_to_cache, token_dtype
from biotf.io.readers import ReaderOptions, read_records
from biotf.data.splits import is_validation
from biotf.errors import InputError, TokenizationError

SEQUENCES = {f"p{i}": "MKVLAACDEFGHIKLMNPQRSTVWY"[: 3 + i % 20] * (1 + i % 3) for i in range(200)}


@pytest.fixture
def fasta(tmp_path, write_fasta):
    return write_fasta(tmp_path / "in.fasta", SEQUENCES)


def test_shards_hold_exact_ids_in_their_split(fasta, tmp_path, char_tokenizer):
    cache = tokenize_to_cache(fasta, char_tokenizer, tmp_path / "cache", validation_fraction=0.25, seed=1)
    assert cache.status == "built"
    records = list(read_records(fasta))
    seen = 0
    for name, shard in cache.splits.items():
        assert shard.tokens.dtype == np.uint8  # the vocabulary fits a byte
        for i in range(len(shard)):
            record = records[int(shard.records[i])]
            assert is_validation(record.sequence, 0.25, 1) == (name == "validation")
            assert shard[i].tolist() == char_tokenizer.encode(record.sequence)
            seen += 1
        assert shard.counts.sum() == shard.n_tokens
        assert shard.counts[char_tokenizer.cls_id] == len(shard)
    assert seen == len(records)
    assert 0 < len(cache.splits["validation"]) < len(records)


def test_chunking_does_not_change_the_result(fasta, tmp_path, char_tokenizer):
    small = tokenize_to_cache(fasta, char_tokenizer, tmp_path / "a", chunk_characters=7)
    large = tokenize_to_cache(fasta, char_tokenizer, tmp_path / "b")
    for name in small.splits:
        assert np.array_equal(small.splits[name].tokens, large.splits[name].tokens)
        assert np.array_equal(small.splits[name].offsets, large.splits[name].offsets)


def test_reused_and_keyed_by_content_tokenizer_and_options(fasta, tmp_path, char_tokenizer, make_char_tokenizer):
    first = tokenize_to_cache(fasta, char_tokenizer, tmp_path / "cache")
    again = tokenize_to_cache(fasta, char_tokenizer, tmp_path / "cache")
    assert again.status == "reused" and again.directory == first.directory
    assert tokenize_to_cache(fasta, char_tokenizer, tmp_path / "cache", seed=5).directory != first.directory
    other = make_char_tokenizer(alphabet="ACDEFGHIKLMNPQRSTVWYX")
    assert tokenize_to_cache(fasta, other, tmp_path / "cache").directory != first.directory
    assert tokenize_to_cache(fasta, char_tokenizer, tmp_path / "cache",
                             ReaderOptions(format="fasta")).directory != first.directory
    fasta.write_text(fasta.read_text() + ">new\nMK\n")
    changed = tokenize_to_cache(fasta, char_tokenizer, tmp_path / "cache")
    assert changed.status == "built" and changed.directory != first.directory


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete", "meta"])
def test_damaged_shard_is_detected_and_rebuilt(fasta, tmp_path, char_tokenizer, damage):
    good = tokenize_to_cache(fasta, char_tokenizer, tmp_path / "cache")
    expected = np.array(good.splits["train"].tokens)
    target = good.directory / "train.tokens.bin"
    data = target.read_bytes()
    if damage == "truncate":
        target.write_bytes(data[:-10])
    elif damage == "flip":
        target.write_bytes(data[:100] + bytes([data[100] ^ 1]) + data[101:])
    elif damage == "delete":
        target.unlink()
    else:
        (good.directory / "meta.json").write_text("{not json")
    rebuilt = tokenize_to_cache(fasta, char_tokenizer, tmp_path / "cache")
    assert rebuilt.status.startswith("rebuilt (")
    assert np.array_equal(rebuilt.splits["train"].tokens, expected)


def test_failed_build_leaves_nothing_under_any_name(tmp_path, write_fasta, char_tokenizer):
    path = write_fasta(tmp_path / "bad.fasta", {**SEQUENCES, "broken": "MKJ"})
    with pytest.raises(TokenizationError) as caught:
        tokenize_to_cache(path, char_tokenizer, tmp_path / "cache")
    message = str(caught.value)
    assert "bad.fasta" in message and "'broken'" in message and "position 2" in message and "test alphabet" in message
    assert list((tmp_path / "cache").iterdir()) == []


def test_policy_stats_are_kept_with_the_cache(tmp_path, write_fasta, char_tokenizer):
    path = write_fasta(tmp_path / "low.fasta", {"a": "mkv", "b": "MKV"})
    assert tokenize_to_cache(path, char_tokenizer, tmp_path / "c").policy_stats["lowercase_folded"] == 3
    assert tokenize_to_cache(path, char_tokenizer, tmp_path / "c").policy_stats["lowercase_folded"] == 3


def test_helpers(fasta):
    assert token_dtype(256) == np.uint8 and token_dtype(257) == np.uint16
    assert token_dtype(65536) == np.uint16 and token_dtype(151665) == np.int32
    assert file_digest(fasta) == file_digest(fasta) and len(file_digest(fasta)) == 32


@pytest.mark.parametrize("vocab_size", [1, 33, 256, 257, 70000])
@pytest.mark.parametrize("n", [0, 1, 2, 999, 1000])
def test_token_counts_are_bincount(vocab_size, n):
    tokens = np.random.default_rng(n).integers(0, vocab_size, n).astype(np.int32)
    counts = token_counts(tokens, vocab_size)
    assert counts.tolist() == np.bincount(tokens, minlength=vocab_size).tolist() and len(counts) == vocab_size


def test_ids_outside_the_vocabulary_are_refused(fasta, tmp_path, char_tokenizer, monkeypatch):
    monkeypatch.setattr(type(char_tokenizer), "vocab_size", property(lambda self: 10))
    with pytest.raises(InputError, match=r"tokenizer produced an id outside 0\.\.9; its vocab_size is wrong"):
        tokenize_to_cache(fasta, char_tokenizer, tmp_path / "cache")


def test_an_entry_written_in_uint16_before_uint8_is_reused_with_the_same_ids(fasta, tmp_path, char_tokenizer,
                                                                            monkeypatch):
    """Caches written before ids that fit a byte were stored as uint8 keep their key and load as they are."""
    import biotf.data.token_cache as cache_module

    monkeypatch.setattr(cache_module, "token_dtype", lambda vocab_size: np.dtype(np.uint16))
    old = tokenize_to_cache(fasta, char_tokenizer, tmp_path / "cache")
    monkeypatch.undo()
    fresh = tokenize_to_cache(fasta, char_tokenizer, tmp_path / "fresh")
    reused = tokenize_to_cache(fasta, char_tokenizer, tmp_path / "cache")
    assert (old.status, reused.status, reused.directory.name) == ("built", "reused", fresh.directory.name)
    for name, shard in reused.splits.items():
        assert shard.tokens.dtype == np.uint16 and fresh.splits[name].tokens.dtype == np.uint8
        assert np.array_equal(shard.tokens, fresh.splits[name].tokens)
        assert np.array_equal(shard.counts, fresh.splits[name].counts)
