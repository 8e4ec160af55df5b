"""KmerTokenizer: the issue's example, a plain-Python reference for every (k, stride), policies, real DNA."""

from __future__ import annotations

import re
from itertools import product

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from biotf.errors import BiotfError, ConfigError, TokenizationError
from biotf.tokenizers import KmerTokenizer, PolicyStats, reverse_complement


def reference_spans(sequence: str, k: int, stride: int) -> list[tuple[int, str]]:
    """The rule in plain Python, as (start, token): windows of k every `stride` bases in each
    A/C/G/T run, leftover bases after the last window one by one, any other character alone."""
    spans = []
    for match in re.finditer(r"[ACGT]+|.", sequence):
        run, at = match.group(), match.start()
        if run[0] not in "ACGT":
            spans.append((at, run))
            continue
        end = 0
        for start in range(0, len(run) - k + 1, stride):
            spans.append((at + start, run[start:start + k]))
            end = start + k
        spans.extend((at + i, run[i]) for i in range(end, len(run)))
    return spans


def reference_tokens(sequence: str, k: int, stride: int) -> list[str]:
    return [token for _, token in reference_spans(sequence, k, stride)]


def test_issue_example_non_overlapping():
    tokenizer = KmerTokenizer(k=6, stride=6)
    assert tokenizer.tokenize("ATCGAATNGGCGATGCAC") == ["ATCGAA", "T", "N", "GGCGAT", "G", "C", "A", "C"]
    assert tokenizer.decode(tokenizer.encode("ATCGAATNGGCGATGCAC")) == "ATCGAATNGGCGATGCAC"


def test_overlapping_is_dnabert_style():
    tokenizer = KmerTokenizer(k=3, stride=1)
    assert tokenizer.tokenize("ACGTA") == ["ACG", "CGT", "GTA"]
    assert tokenizer.tokenize("ACNGTAC") == ["A", "C", "N", "GTA", "TAC"]
    assert tokenizer.decode(tokenizer.encode("ACNGTAC")) == "ACNGTAC"
    assert (tokenizer.k, tokenizer.stride, tokenizer.overlapping) == (3, 1, True)


def test_k1_is_a_character_tokenizer():
    tokenizer = KmerTokenizer(k=1)
    assert tokenizer.tokenize("GATTACAN") == list("GATTACAN")
    assert tokenizer.vocab_size == 5 + 5


def test_vocabulary_layout():
    tokenizer = KmerTokenizer(k=6)
    vocab = tokenizer.get_vocab()
    assert tokenizer.vocab_size == 5 + 4 ** 6 + 5 == len(vocab)
    assert [tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.eos_id, tokenizer.mask_id] == [0, 1, 2, 3, 4]
    kmers = ["".join(p) for p in product("ACGT", repeat=6)]
    assert [vocab[kmer] for kmer in kmers] == list(range(5, 5 + 4096))
    assert [vocab[b] for b in "ACGTN"] == list(range(4101, 4106))
    assert tokenizer.encode("AAAAAA") == [2, 5, 3]


@settings(max_examples=300, deadline=None)
@given(k=st.integers(1, 7), data=st.data())
def test_matches_reference_for_every_stride(k, data):
    stride = data.draw(st.integers(1, k))
    texts = data.draw(st.lists(st.text("ACGTN", max_size=40), min_size=1, max_size=5))
    tokenizer = KmerTokenizer(k=k, stride=stride)
    vocab = tokenizer.get_vocab()
    batch = tokenizer.encode_batch(texts, add_special_tokens=False)
    for text, ids in zip(texts, batch):
        assert ids.tolist() == [vocab[t] for t in reference_tokens(text, k, stride)]
        assert tokenizer.decode(ids) == text
    # soft-masking: the same ids from the lowercased copy, and a token is masked iff it covers a lowercase base
    cased = [data.draw(st.text("ACGTNacgtn", min_size=len(t), max_size=len(t))) for t in texts]
    cased = ["".join(c if c.upper() == b else b for c, b in zip(case, text)) for case, text in zip(cased, texts)]
    ids, masks = tokenizer.encode_batch_with_soft_mask(cased, add_special_tokens=False)
    assert [i.tolist() for i in ids] == [b.tolist() for b in batch]
    for text, mask in zip(cased, masks):
        spans = reference_spans(text.upper(), k, stride)
        assert mask.tolist() == [any(c.islower() for c in text[at:at + len(token)]) for at, token in spans]


def test_lowercase_fold_and_soft_mask():
    tokenizer = KmerTokenizer(k=3)
    stats = PolicyStats()
    ids, masks = tokenizer.encode_batch_with_soft_mask(["ACGtacGTAa"], stats=stats)
    assert ids[0].tolist() == tokenizer.encode("ACGTACGTAA")
    assert tokenizer.tokenize("ACGtacGTAa") == ["ACG", "TAC", "GTA", "A"]
    assert masks[0].tolist() == [False, False, True, False, True, False]  # <cls> ... <eos> are False
    assert stats == {"lowercase_folded": 4}
    with pytest.raises(ConfigError):
        KmerTokenizer(lowercase="error").encode_batch_with_soft_mask(["ACGT"])


def test_soft_mask_overlapping_marks_every_window_touching_a_lowercase_base():
    _, masks = KmerTokenizer(k=3, stride=1).encode_batch_with_soft_mask(["ACgTA"], add_special_tokens=False)
    assert masks[0].tolist() == [True, True, True]
    _, masks = KmerTokenizer(k=3, stride=1).encode_batch_with_soft_mask(["aCGTA"], add_special_tokens=False)
    assert masks[0].tolist() == [True, False, False]


def test_lowercase_error():
    with pytest.raises(TokenizationError) as error:
        KmerTokenizer(lowercase="error").encode("ACGTa", record="r")
    assert (error.value.char, error.value.position, error.value.record) == ("a", 4, "r")


def test_uracil_policies():
    with pytest.raises(TokenizationError, match="uracil='error'"):
        KmerTokenizer(k=2).encode("ACGU")
    stats = PolicyStats()
    tokenizer = KmerTokenizer(k=2, uracil="to_t")
    assert tokenizer.tokenize("ACGUu") == ["AC", "GT", "T"]
    tokenizer.encode_batch(["ACGUu"], stats=stats)
    assert stats == {"U_to_T": 2, "lowercase_folded": 1}


@pytest.mark.parametrize("code", list("RYSWKMBDHV"))
def test_iupac_policies(code):
    stats = PolicyStats()
    assert KmerTokenizer(k=2).encode_batch([f"AC{code}GT"], stats=stats, add_special_tokens=False)[0].tolist() == \
        KmerTokenizer(k=2).encode("ACNGT", add_special_tokens=False)
    assert stats == {"iupac_to_N": 1}
    with pytest.raises(TokenizationError) as error:
        KmerTokenizer(k=2, iupac="error").encode_batch(["ACGT", f"AC{code}GT"], records=["a", "b"])
    assert (error.value.char, error.value.position, error.value.record) == (code, 2, "b")


@pytest.mark.parametrize("char", ["-", "*", "1", " ", "X", "é"])
def test_unknown_policies(char):
    with pytest.raises(TokenizationError) as error:
        KmerTokenizer(k=3).encode(f"ACGT{char}A", record="x")
    assert (error.value.char, error.value.position) == (char, 4)
    stats = PolicyStats()
    tokenizer = KmerTokenizer(k=3, unknown="to_unk")
    assert tokenizer.encode_batch([f"ACG{char}{char}A"], stats=stats, add_special_tokens=False)[0].tolist() == \
        [tokenizer.get_vocab()["ACG"], 1, 1, tokenizer.get_vocab()["A"]]
    assert stats == {"unknown_to_unk": 2}


@pytest.mark.parametrize("k, stride", [(0, 1), (3, 4), (3, 0), (13, 1), ("6", 6)])
def test_bad_k_or_stride(k, stride):
    with pytest.raises(ConfigError):
        KmerTokenizer(k=k, stride=stride)


def test_reverse_complement_iupac():
    assert reverse_complement("ACGT") == "ACGT"
    assert reverse_complement("AACG") == "CGTT"
    pairs = {"R": "Y", "K": "M", "B": "V", "D": "H", "S": "S", "W": "W", "N": "N"}
    for code, partner in pairs.items():
        assert reverse_complement(code) == partner and reverse_complement(partner) == code
    assert reverse_complement("acgtRy") == "rYacgt"
    sequence = "ACGTRYSWKMBDHVN" * 3
    assert reverse_complement(reverse_complement(sequence)) == sequence
    with pytest.raises(TokenizationError) as error:
        reverse_complement("ACG-T", record="r1")
    assert (error.value.char, error.value.position, error.value.record) == ("-", 3, "r1")


def test_real_splice_cases(splice):
    tokenizer = KmerTokenizer(k=6)
    names = [name for name, _ in splice]
    sequences = [sequence for _, sequence in splice]
    stats = PolicyStats()
    batch = tokenizer.encode_batch(sequences, records=names, stats=stats)
    assert stats == {"iupac_to_N": 4}  # D x2, R x1, S x1
    n_run = dict(splice)["HUMALPI1-DONOR-42"]
    assert n_run.endswith("N" * 41) and len(n_run) == 60
    ids = tokenizer.encode(n_run)
    assert ids[1:-1].count(tokenizer.get_vocab()["N"]) == 41
    assert tokenizer.tokenize(n_run)[:4] == [n_run[0:6], n_run[6:12], n_run[12:18], n_run[18]]
    with pytest.raises(TokenizationError) as error:
        KmerTokenizer(iupac="error").encode_batch(sequences, records=names)
    first_bad = next(i for i, s in enumerate(sequences) if re.search("[RYSWKMBDHV]", s))
    assert error.value.record == names[first_bad]
    assert error.value.char in "DRS"
    decoded = {tokenizer.decode(ids) for ids in batch}
    assert all(len(d) == 60 for d in decoded)


def test_real_lowercase_promoters(promoters):
    tokenizer = KmerTokenizer(k=6)
    stats = PolicyStats()
    ids, masks = tokenizer.encode_batch_with_soft_mask(list(promoters.values()), records=list(promoters), stats=stats)
    assert stats == {"lowercase_folded": 57 * 106}
    assert all(mask[1:-1].all() for mask in masks)
    assert ids[0].tolist() == tokenizer.encode(promoters["S10"].upper())
    with pytest.raises(TokenizationError) as error:
        KmerTokenizer(lowercase="error").encode_batch(list(promoters.values()), records=list(promoters))
    assert (error.value.record, error.value.position) == ("S10", 0)


def test_real_genbank_genomes(genomes):
    assert len(genomes) == 3 and max(map(len, genomes.values())) == 154_478
    for k, stride in [(6, 6), (6, 1), (1, 1), (3, 2)]:
        tokenizer = KmerTokenizer(k=k, stride=stride)
        batch = tokenizer.encode_batch(list(genomes.values()), add_special_tokens=False)
        for sequence, ids in zip(genomes.values(), batch):
            expected = len(sequence) // k if stride == k else (len(sequence) - k) // stride + 1
            assert len(ids) >= expected
            assert tokenizer.decode(ids) == sequence
    chloroplast = max(genomes.values(), key=len)
    assert reverse_complement(reverse_complement(chloroplast)) == chloroplast


@pytest.mark.parametrize("options", [{"k": 6}, {"k": 1}, {"k": 4, "uracil": "to_t", "unknown": "to_unk"}])
def test_to_hf_gives_identical_ids(options, splice, promoters, genomes, tmp_path):
    tokenizer = KmerTokenizer(**options)
    hf = tokenizer.to_hf()
    texts = [s for _, s in splice[:500]] + list(promoters.values()) + [g[:20_000] for g in genomes.values()]
    texts += ["ATCGAATNGGCGATGCAC", "acgtRYswNN", ""]
    if options.get("unknown") == "to_unk":
        texts += ["ACGU-*X é", "uuACGT", "AC<mask>G"]  # a special token's spelling is text here, as in biotf
    assert [ids.tolist() for ids in tokenizer.encode_batch(texts)] == hf(texts)["input_ids"]
    assert hf.decode(hf("ACGTACGT")["input_ids"], skip_special_tokens=True) == "ACGTACGT"
    hf.save_pretrained(tmp_path)
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(tmp_path)(texts)["input_ids"] == hf(texts)["input_ids"]


def test_overlapping_to_hf_is_a_clear_error():
    for stride in (1, 3):
        with pytest.raises(BiotfError, match="overlapping k-mers.*no Hugging Face"):
            KmerTokenizer(k=6, stride=stride).to_hf()


def test_batch_equals_single():
    tokenizer = KmerTokenizer(k=4, stride=2)
    texts = ["", "ACGTACGTA", "N", "ACGTNACGTAC", "acg"]
    assert [b.tolist() for b in tokenizer.encode_batch(texts)] == [tokenizer.encode(t) for t in texts]
    assert all(b.dtype == np.int32 for b in tokenizer.encode_batch(texts))
