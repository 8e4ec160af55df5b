"""`encode_chunks` and `tokenize_file`: chunks kept whole, errors naming the file, one line per record, counts
over the whole file however it is chunked or limited."""

from __future__ import annotations

import io

import pytest

import biotf.data.tokenize as tokenize
from biotf.io.readers import ReaderOptions, Record
from biotf.errors import TokenizationError


def test_lines_and_counts_cover_every_chunk(char_tokenizer, tmp_path, monkeypatch):
    monkeypatch.setattr(tokenize, "CHUNK_RECORDS", 2)  # five records: three chunks
    path = tmp_path / "x.txt"
    path.write_text("MK\n\nmkv\nA\nCC\nD\n")
    out = io.StringIO()
    records, tokens, policies = tokenize.tokenize_file(char_tokenizer, path, ReaderOptions(), out)
    lines = out.getvalue().splitlines()
    assert len(lines) == records == 5
    assert lines[0].split("\t")[1] == "<cls> M K <eos>" and lines[1].split("\t")[1] == "<cls> M K V <eos>"
    assert tokens == 2 + 3 + 1 + 2 + 1 + 5 * 2
    assert policies["lowercase_folded"] == 3 and policies["blank_lines_skipped"] == 1


def test_limit_prints_the_first_records_and_still_counts_all(char_tokenizer, tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("MK\nA\nCC\n")
    out = io.StringIO()
    result = tokenize.tokenize_file(char_tokenizer, path, ReaderOptions(), out, as_ids=True,
                                    add_special_tokens=False, limit=1)
    ids = [char_tokenizer.vocab[c] for c in "MK"]
    assert out.getvalue().split("\t")[1] == " ".join(map(str, ids)) + "\n"
    assert (result.records, result.tokens) == (3, 5)


def test_a_tokenizer_error_names_the_file(char_tokenizer, tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("MK\nMJ\n")
    with pytest.raises(TokenizationError, match="bad.txt"):
        tokenize.tokenize_file(char_tokenizer, path, ReaderOptions(), io.StringIO())


def test_encode_chunks_keeps_chunks_whole_and_names_the_source_only_when_given(char_tokenizer):
    records = [Record(id=f"r{i}", sequence=text, metadata={}, index=i) for i, text in enumerate(["MK", "A", "CC", "MJ"])]
    chunks = tokenize.record_chunks(records[:3], 2)
    pairs = list(tokenize.encode_chunks(chunks, char_tokenizer, add_special_tokens=False))
    assert [[r.id for r in chunk] for chunk, _ in pairs] == [["r0", "r1"], ["r2"]]
    assert [len(ids) for _, encoded in pairs for ids in encoded] == [2, 1, 2]
    with pytest.raises(TokenizationError) as bare:
        list(tokenize.encode_chunks([records[3:]], char_tokenizer, False))
    assert bare.value.source is None and "record 'r3'" in str(bare.value)
    with pytest.raises(TokenizationError, match="in.fasta"):
        list(tokenize.encode_chunks([records[3:]], char_tokenizer, False, source="in.fasta"))


@pytest.mark.parametrize("scheme", ["protein", "dna", "smiles", "test-char"])
@pytest.mark.parametrize("add_special_tokens", [True, False])
def test_encode_flat_is_encode_batch_joined(char_tokenizer, scheme, add_special_tokens):
    """The token cache's flat encoding: the batch's arrays joined, and their lengths (the empty text included)."""
    import numpy as np

    from biotf.tokenizers import build_tokenizer

    tokenizer = char_tokenizer if scheme == "test-char" else build_tokenizer({"kind": scheme})
    texts = {"protein": ["MKV", "", "acdU", "<mask>LL"], "dna": ["ACGT", "", "acgtn" * 3],
             "smiles": ["CCO", "", "c1ccccc1"], "test-char": ["MKV", "", "acd"]}[scheme]
    batch = tokenizer.encode_batch(texts, add_special_tokens)
    flat, lengths = tokenizer.encode_flat(texts, add_special_tokens)
    assert lengths.tolist() == [len(ids) for ids in batch]
    assert flat.tolist() == np.concatenate(batch).tolist()
