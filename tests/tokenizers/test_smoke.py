"""First checks of the four tokenizers: the issue's headline examples (deeper tests sit beside this file)."""

from biotf.tokenizers import AminoAcidTokenizer, KmerTokenizer, build_tokenizer, load_tokenizer


def test_esm2_golden_ids():
    tokenizer = AminoAcidTokenizer()
    assert tokenizer.encode("LAGV.-") == [0, 4, 5, 6, 7, 29, 30, 2]
    assert (tokenizer.cls_id, tokenizer.pad_id, tokenizer.eos_id, tokenizer.unk_id, tokenizer.mask_id) == (0, 1, 2, 3, 32)


def test_kmer_issue_example():
    assert KmerTokenizer(6, 6).tokenize("ATCGAATNGGCGATGCAC") == ["ATCGAA", "T", "N", "GGCGAT", "G", "C", "A", "C"]


def test_build_and_reload(tmp_path):
    tokenizer = build_tokenizer({"kind": "dna", "k": 3, "stride": 1})
    tokenizer.save(tmp_path)
    assert load_tokenizer(tmp_path).fingerprint == tokenizer.fingerprint
