"""AminoAcidTokenizer: ESM-2's ids exactly, every character policy, and the real proteins the issue names."""

from __future__ import annotations

import json

import numpy as np
import pytest

from biotf.errors import ConfigError, TokenizationError
from biotf.tokenizers import AminoAcidTokenizer, PolicyStats
from biotf.tokenizers.amino_acid import ESM2_TOKENS

ESM2_LAYOUT = ["<cls>", "<pad>", "<eos>", "<unk>", "L", "A", "G", "V", "S", "E", "R", "T", "I", "D", "P", "K", "Q",
               "N", "F", "Y", "M", "H", "W", "C", "X", "B", "U", "Z", "O", ".", "-", "<null_1>", "<mask>"]


@pytest.fixture(scope="module")
def esm_reference(tmp_path_factory):
    """transformers' EsmTokenizer over ESM-2's vocab.txt (the file facebook/esm2_* ship)."""
    from transformers import EsmTokenizer

    vocab = tmp_path_factory.mktemp("esm2") / "vocab.txt"
    vocab.write_text("\n".join(ESM2_LAYOUT) + "\n")
    return EsmTokenizer(str(vocab))


def test_golden_esm2_layout():
    tokenizer = AminoAcidTokenizer()
    assert list(ESM2_TOKENS) == ESM2_LAYOUT
    assert tokenizer.get_vocab() == {token: i for i, token in enumerate(ESM2_LAYOUT)}
    assert tokenizer.vocab_size == len(tokenizer) == 33
    assert (tokenizer.cls_id, tokenizer.pad_id, tokenizer.eos_id, tokenizer.unk_id, tokenizer.mask_id) == (0, 1, 2, 3, 32)
    assert tokenizer.bos_id is None
    assert tokenizer.special_ids == {0, 1, 2, 31, 32}
    assert tokenizer.encode("MKTAYIAK") == [0, 20, 15, 11, 5, 19, 12, 5, 15, 2]
    assert tokenizer.encode("LAGVSERTIDPKQNFYMHWCXBUZO.-", add_special_tokens=False) == list(range(4, 31))


def test_matches_esm_tokenizer_on_real_proteins(esm_reference, deeploc_test, flip):
    tokenizer = AminoAcidTokenizer()
    sequences = list(deeploc_test.values())[:300] + [flip["1nth-A"]] + [deeploc_test["P00293"]]
    batch = tokenizer.encode_batch(sequences)
    for sequence, ids in zip(sequences, batch):
        assert ids.dtype == np.int32
        assert ids.tolist() == esm_reference(sequence)["input_ids"]
    assert tokenizer.encode("ACD<mask>EF") == esm_reference("ACD<mask>EF")["input_ids"]


def test_special_tokens_written_in_text():
    tokenizer = AminoAcidTokenizer()
    assert tokenizer.tokenize("MK<mask>A<pad>") == ["M", "K", "<mask>", "A", "<pad>"]
    with pytest.raises(TokenizationError, match="position 2"):
        tokenizer.encode("MK<mas>A")


def test_lowercase_policies():
    stats = PolicyStats()
    assert AminoAcidTokenizer().encode_batch(["mKta"], stats=stats)[0].tolist() == [0, 20, 15, 11, 5, 2]
    assert stats == {"lowercase_folded": 3}
    with pytest.raises(TokenizationError) as error:
        AminoAcidTokenizer(lowercase="error").encode("MKtA", record="P1")
    assert (error.value.char, error.value.position, error.value.record) == ("t", 2, "P1")
    assert "lowercase='error'" in str(error.value)


@pytest.mark.parametrize("policy, expected", [("keep", "UOBZ"), ("to_x", "XXXX")])
def test_rare_residue_policies(policy, expected):
    stats = PolicyStats()
    tokenizer = AminoAcidTokenizer(rare_residues=policy)
    assert tokenizer.decode(tokenizer.encode_batch(["AUOBZa", "u"], stats=stats)[0]) == "A" + expected + "A"
    assert stats.get("rare_to_X", 0) == (5 if policy == "to_x" else 0)


def test_rare_residue_error_names_record_position_char():
    with pytest.raises(TokenizationError) as error:
        AminoAcidTokenizer(rare_residues="error").encode_batch(["MKV", "MKVAZ"], records=["ok", "bad"])
    assert (error.value.char, error.value.position, error.value.record) == ("Z", 4, "bad")


@pytest.mark.parametrize("char", ["J", "*", "1", " ", "é", "字"])
def test_unknown_characters_refused_by_default(char):
    with pytest.raises(TokenizationError) as error:
        AminoAcidTokenizer().encode_batch(["MKV", f"MK{char}V"], records=["a", "b"])
    assert (error.value.char, error.value.position, error.value.record) == (char, 2, "b")
    assert "unknown='error'" in str(error.value)


def test_unknown_to_unk_is_one_token_per_character():
    stats = PolicyStats()
    tokenizer = AminoAcidTokenizer(unknown="to_unk")
    ids = tokenizer.encode_batch(["MK**J1éV"], stats=stats, add_special_tokens=False)[0].tolist()
    assert ids == [20, 15, 3, 3, 3, 3, 3, 7]
    assert stats == {"unknown_to_unk": 5}


def test_error_without_records_names_batch_item():
    with pytest.raises(TokenizationError, match=r"position 1.*batch item 2"):
        AminoAcidTokenizer().encode_batch(["A", "C", "A*"])


def test_bad_option_is_config_error():
    with pytest.raises(ConfigError, match=r"rare_residues.*allowed: keep \| to_x \| error"):
        AminoAcidTokenizer(rare_residues="drop")


def test_batch_equals_single_and_handles_empty():
    tokenizer = AminoAcidTokenizer()
    texts = ["", "MKV", "", "<mask>", "a"]
    batch = tokenizer.encode_batch(texts)
    assert [b.tolist() for b in batch] == [tokenizer.encode(t) for t in texts]
    assert tokenizer.encode_batch([]) == []
    assert tokenizer.encode("", add_special_tokens=False) == []


def test_real_rare_residue_cases(deeploc_test, deeploc_val, flip):
    keep, to_x = AminoAcidTokenizer(), AminoAcidTokenizer(rare_residues="to_x")
    refuse = AminoAcidTokenizer(rare_residues="error")
    cases = {"P00293": (deeploc_test, "BZ"), "Q923V8": (deeploc_val, "U"), "1nth-A": (flip, "O")}
    for record, (data, residues) in cases.items():
        sequence = data[record]
        assert set(residues) <= set(sequence)
        assert keep.decode(keep.encode(sequence, record=record)) == sequence
        stats = PolicyStats()
        to_x.encode_batch([sequence], records=[record], stats=stats)
        assert stats["rare_to_X"] == sum(sequence.count(r) for r in residues)
        with pytest.raises(TokenizationError) as error:
            refuse.encode(sequence, record=record)
        first = min(sequence.index(r) for r in residues)
        assert (error.value.record, error.value.position, error.value.char) == (record, first, sequence[first])


def test_real_x_sequences_and_longest_protein(deeploc_test, deeploc_val):
    tokenizer = AminoAcidTokenizer()
    with_x = [s for s in deeploc_test.values() if "X" in s]
    assert with_x
    for ids in tokenizer.encode_batch(with_x, add_special_tokens=False):
        assert tokenizer.get_vocab()["X"] in ids
    longest = max(deeploc_val.values(), key=len)
    assert len(longest) == 13_100
    ids = tokenizer.encode(longest)
    assert len(ids) == 13_102 and tokenizer.decode(ids) == longest


def test_whole_real_sets_encode_and_round_trip(deeploc_test, deeploc_val, flip):
    tokenizer = AminoAcidTokenizer()
    for data in (deeploc_test, deeploc_val, flip):
        ids, sequences = data.keys(), list(data.values())
        stats = PolicyStats()
        batch = tokenizer.encode_batch(sequences, records=list(ids), stats=stats)
        assert stats == {}  # the real sets are clean upper case
        assert all(len(b) == len(s) + 2 for b, s in zip(batch, sequences))
        assert [tokenizer.decode(b) for b in batch[:500]] == sequences[:500]


@pytest.mark.parametrize("options", [{}, {"rare_residues": "to_x", "unknown": "to_unk"}, {"lowercase": "error"}])
def test_to_hf_gives_identical_ids(options, deeploc_test, flip):
    tokenizer = AminoAcidTokenizer(**options)
    hf = tokenizer.to_hf()
    sequences = list(deeploc_test.values())[:200] + [flip["1nth-A"], deeploc_test["P00293"], "MKV<mask>A"]
    if options.get("lowercase") != "error":
        sequences += ["mkvuoBZ", "acdefg"]
    if options.get("unknown") == "to_unk":
        sequences += ["MK*J1éV"]
    assert [b.tolist() for b in tokenizer.encode_batch(sequences)] == hf(sequences)["input_ids"]
    assert hf.decode(hf("MKV")["input_ids"], skip_special_tokens=True) == "MKV"
    assert (hf.pad_token_id, hf.mask_token_id, hf.cls_token_id, hf.eos_token_id) == (1, 32, 0, 2)


@pytest.mark.parametrize("unknown", ["error", "to_unk"])
def test_stop_policies_count_and_fingerprint_only_when_ids_change(unknown, tmp_path):
    """`*` of translated genes: strip_terminal drops one trailing `*` (counted), to_unk makes each `<unk>` (counted);
    the default keeps the ids and fingerprint of tokenizers saved before the option existed."""
    from biotf.tokenizers import load_tokenizer

    base = AminoAcidTokenizer(unknown=unknown)
    assert base.fingerprint == AminoAcidTokenizer(unknown=unknown, stop="error").fingerprint
    assert base.identity_config() == {"lowercase": "fold", "rare_residues": "keep", "unknown": unknown}
    stats = PolicyStats()
    strip = AminoAcidTokenizer(unknown=unknown, stop="strip_terminal")
    assert strip.encode_batch(["MKV*", "MKV", "MK**"][:2 if unknown == "error" else 3], stats=stats,
                              add_special_tokens=False)[0].tolist() == [20, 15, 7]
    assert stats["stop_stripped"] == (1 if unknown == "error" else 2)
    if unknown == "error":
        with pytest.raises(TokenizationError, match=r"position 2.*stop codon inside the sequence") as error:
            strip.encode_batch(["MK*V*"], records=["gene"])
        assert (error.value.char, error.value.record) == ("*", "gene")
    stats = PolicyStats()
    to_unk = AminoAcidTokenizer(unknown=unknown, stop="to_unk")
    assert to_unk.encode("M*K*", add_special_tokens=False, stats=stats) == [20, 3, 15, 3]
    assert stats == {"stop_to_unk": 2}
    # strip_terminal always changes ids; to_unk only where `*` was refused before
    assert strip.fingerprint != base.fingerprint
    assert (to_unk.fingerprint != base.fingerprint) == (unknown == "error")
    # a tokenizer.json written before `stop` existed (no key in its config) loads with the same fingerprint
    saved = base.save(tmp_path)
    payload = json.loads(saved.read_text())
    del payload["config"]["stop"]
    saved.write_text(json.dumps(payload))
    assert load_tokenizer(tmp_path).fingerprint == base.fingerprint
    assert load_tokenizer(strip.save(tmp_path / "s")).stop == "strip_terminal"


def test_stop_codon_error_names_the_stop_options():
    with pytest.raises(TokenizationError, match=r"stop='error'.*stop='strip_terminal'") as error:
        AminoAcidTokenizer().encode_batch(["MKV*"], records=["orf1"])
    assert (error.value.char, error.value.position) == ("*", 3)


def test_strip_terminal_to_hf_gives_identical_ids(deeploc_test):
    tokenizer = AminoAcidTokenizer(stop="strip_terminal")
    sequences = [s + "*" for s in list(deeploc_test.values())[:50]] + ["MKV", "MKV*", "*"]
    assert [b.tolist() for b in tokenizer.encode_batch(sequences)] == tokenizer.to_hf()(sequences)["input_ids"]
