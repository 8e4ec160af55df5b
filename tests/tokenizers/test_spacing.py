"""Vocabularies typed with spaces: a plain sequence reaches a ProtBert-style vocabulary as its authors type it
(`" ".join(sequence)`, detected from the directory), DNABERT's k-mers only with the option a plain sequence's refusal
names; both give `transformers`' ids on the typed text, count what they did and survive save / load."""

from __future__ import annotations

import json

import pytest
from hf_tokenizer_dirs import overlapping_kmers, write_tokenizer

from biotf.errors import ConfigError, InputError, TokenizationError
from biotf.tokenizers import BPETokenizer, PolicyStats, load_tokenizer
from biotf.tokenizers.hf_tokenizer_directory import read_hf_tokenizer
from biotf.tokenizers.build import with_options

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def protbert_dir(tmp_path_factory):
    return write_tokenizer("protbert", tmp_path_factory.mktemp("protbert"), [])


@pytest.fixture(scope="module")
def dnabert_dir(tmp_path_factory):
    return write_tokenizer("dnabert", tmp_path_factory.mktemp("dnabert"), [])


@pytest.fixture(scope="module")
def proteins(deeploc_test) -> list[str]:
    return list(deeploc_test.values())[:50]


def test_plain_sequences_reach_protbert_as_its_authors_type_them(protbert_dir, proteins):
    reference = transformers.AutoTokenizer.from_pretrained(protbert_dir)
    ours, stats = read_hf_tokenizer(protbert_dir), PolicyStats()
    assert ours.spacing.mode == "residues" and ours.input_convention == {
        "spacing": "residues (detected from the vocabulary)", "rare_residues": "keep"}
    expected = reference([" ".join(p) for p in proteins])["input_ids"]
    assert [ids.tolist() for ids in ours.encode_batch(proteins, stats=stats)] == expected
    assert stats == {"spaced_residues": len(proteins)}  # deeploc holds no U/Z/O/B outside the vocabulary
    assert ours.encode_batch([" ".join(p) for p in proteins[:5]])[0].tolist() == expected[0]  # typed with spaces too
    assert ours.tokenize(proteins[0]) == list(proteins[0])
    assert ours.count_residues(" ".join(proteins[0])) == ours.count_residues(proteins[0]) == len(proteins[0])
    plain = with_options(ours, {"spacing": "none"})  # as given: one word, one [UNK]
    assert plain.encode(proteins[0]) == reference(proteins[0])["input_ids"] == [plain.cls_id, plain.unk_id,
                                                                                  plain.eos_id]
    assert plain.fingerprint != ours.fingerprint


def test_rare_residues_map_to_x_as_the_model_card_says(protbert_dir):
    reference = transformers.AutoTokenizer.from_pretrained(protbert_dir)
    ours, stats = with_options(read_hf_tokenizer(protbert_dir), {"rare_residues": "to_x"}), PolicyStats()
    assert ours.encode("MUKZOB", stats=stats) == reference("M X K X X X")["input_ids"]
    assert stats == {"rare_to_X": 4, "spaced_residues": 1}
    kept = read_hf_tokenizer(protbert_dir)
    assert kept.encode("MUKZOB") == reference("M U K Z O B")["input_ids"]  # ProtBert's vocabulary holds them
    with pytest.raises(TokenizationError, match="record 'p1', position 1: rare residue refused"):
        with_options(kept, {"rare_residues": "error"}).encode("MUK", record="p1")


def test_the_convention_survives_save_and_transformers_reads_the_save(protbert_dir, proteins, tmp_path):
    ours = with_options(read_hf_tokenizer(protbert_dir), {"rare_residues": "to_x"})
    ours.save(tmp_path)
    again = load_tokenizer(tmp_path)
    assert isinstance(again, BPETokenizer) and again.fingerprint == ours.fingerprint
    assert again.spacing == ours.spacing and again.encode(proteins[0] + "U") == ours.encode(proteins[0] + "U")
    assert json.loads((tmp_path / "tokenizer_config.json").read_text())["biotf_rare_residues"] == "to_x"
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path)
    assert reference(" ".join(proteins[0]))["input_ids"] == ours.encode(proteins[0])
    rebuilt = BPETokenizer.from_config(json.loads(json.dumps(ours.to_config())))
    assert rebuilt.fingerprint == ours.fingerprint


@pytest.mark.parametrize("kind", ["bert", "bert-cased", "gpt2", "roberta", "llama"])
def test_other_vocabularies_read_text_as_given(kind, tmp_path, deeploc_test):
    """English WordPiece (single letters among longer words), byte-level and SentencePiece BPE read as given."""
    proteins = list(deeploc_test.values())[:100]
    tokenizer = read_hf_tokenizer(write_tokenizer(kind, tmp_path, proteins))
    assert tokenizer.spacing.mode == "none" and tokenizer.input_convention == {}


def test_dnabert_needs_the_option_its_refusal_names(dnabert_dir, splice):
    reference = transformers.AutoTokenizer.from_pretrained(dnabert_dir)
    dna = [sequence for _, sequence in splice[:40]]
    tokenizer = read_hf_tokenizer(dnabert_dir)
    assert tokenizer.spacing.mode == "none" and tokenizer.spacing.k == 6
    assert tokenizer.encode(overlapping_kmers(dna[0], 6)) == reference(overlapping_kmers(dna[0], 6))["input_ids"]
    with pytest.raises(InputError, match=r"record 'r1' is a plain sequence, .* reads 6-mers typed with spaces .*"
                                         r"tokenizer_options spacing=overlapping-kmers"):
        tokenizer.encode(dna[0], record="r1")
    kmers, stats = with_options(tokenizer, {"spacing": "overlapping-kmers"}), PolicyStats()
    expected = reference([overlapping_kmers(s, 6) for s in dna])["input_ids"]
    assert [ids.tolist() for ids in kmers.encode_batch(dna, stats=stats)] == expected
    assert stats["spaced_kmers"] == len(dna)
    with pytest.raises(InputError, match="'short' has 4 residues, fewer than one 6-mer"):
        kmers.encode("ACGT", record="short")


def test_overlapping_kmers_on_a_vocabulary_of_residues_is_refused(protbert_dir):
    with pytest.raises(ConfigError, match="tokenizer.spacing.*not k-mers of one length"):
        with_options(read_hf_tokenizer(protbert_dir), {"spacing": "overlapping-kmers"})
    with pytest.raises(ConfigError, match="tokenizer.spacing"):
        with_options(read_hf_tokenizer(protbert_dir), {"spacing": "words"})


def test_a_model_card_that_maps_rare_residues_to_x_is_followed(protbert_dir, tmp_path):
    """ProtBert's and ProtT5's model cards (the README.md a hub download holds) map U, Z, O and B to X before
    tokenizing: a directory whose card says so reads them that way, counted; `rare_residues=keep` reads them as
    given."""
    import shutil

    card_dir = tmp_path / "prot_bert"
    shutil.copytree(protbert_dir, card_dir)
    (card_dir / "README.md").write_text("```python\nsequence_Example = \"A E T C Z A O\"\n"
                                        "sequence_Example = re.sub(r\"[UZOB]\", \"X\", sequence_Example)\n```\n")
    reference = transformers.AutoTokenizer.from_pretrained(card_dir)
    ours, stats = read_hf_tokenizer(card_dir), PolicyStats()
    assert ours.input_convention == {"spacing": "residues (detected from the vocabulary)", "rare_residues": "to_x"}
    assert ours.encode("AETCZAO", stats=stats) == reference("A E T C X A X")["input_ids"]
    assert stats == {"rare_to_X": 2, "spaced_residues": 1}
    assert with_options(ours, {"rare_residues": "keep"}).encode("AETCZAO") == reference("A E T C Z A O")["input_ids"]
    (card_dir / "README.md").write_text("Input: residues separated by spaces.\n")
    assert read_hf_tokenizer(card_dir).spacing.rare_residues == "keep"
