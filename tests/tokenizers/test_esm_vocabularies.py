"""ESM directories whose vocab.txt is not ESM-2's, as published: Nucleotide Transformer v1 (an EsmForMaskedLM over
6-mers, then single nucleotides) and SaProt (one token per residue + Foldseek 3Di letter, "Md" "Kp"). Their
tokenizer gives the ids and decoding of `transformers`' AutoTokenizer (EsmTokenizer) on the same directory, and the
model directory loads with `transformers`' logits on those ids."""

from __future__ import annotations

import itertools
import json
import random

import pytest
import torch

from biotf import Model
from biotf.tokenizers import AminoAcidTokenizer, BPETokenizer, load_tokenizer
from biotf.tokenizers.hf_tokenizer_directory import read_hf_tokenizer

transformers = pytest.importorskip("transformers")
NT_SPECIALS = ["<unk>", "<pad>", "<mask>", "<cls>", "<eos>", "<bos>"]
NT_VOCAB = NT_SPECIALS + ["".join(kmer) for kmer in itertools.product("ATCG", repeat=6)] + list("ATCGN")
SAPROT_RESIDUES, SAPROT_STRUCTURE = "ACDEFGHIKLMNPQRSTVWY#", "pynwrqhgdlvtmfsaeikc#"
SAPROT_VOCAB = (["<cls>", "<pad>", "<eos>", "<unk>"] + [a + s for a in SAPROT_RESIDUES for s in SAPROT_STRUCTURE]
                + ["<mask>"])


def write_esm_directory(directory, vocab: list[str], seed: int = 0, **tokenizer_config) -> tuple:
    """A tiny random EsmForMaskedLM (absolute positions, as NT v1) over `vocab`, with its vocab.txt and an
    EsmTokenizer tokenizer_config.json, as the hub holds them."""
    torch.manual_seed(seed)
    config = transformers.EsmConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                    intermediate_size=64, max_position_embeddings=64,
                                    position_embedding_type="absolute", pad_token_id=vocab.index("<pad>"),
                                    mask_token_id=vocab.index("<mask>"), token_dropout=False, layer_norm_eps=1e-5,
                                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = transformers.EsmForMaskedLM(config).eval()
    model.save_pretrained(directory)
    (directory / "vocab.txt").write_text("\n".join(vocab), encoding="utf-8")
    (directory / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "EsmTokenizer",
                                                                 "model_max_length": 62, **tokenizer_config}))
    return model, transformers.AutoTokenizer.from_pretrained(directory)


def dna_texts(rng: random.Random) -> list[str]:
    """DNA as users give NT (plain; lowercase, N, spaces, a stray letter and `<mask>` among them)."""
    texts = ["".join(rng.choice("ACGT") for _ in range(rng.randint(0, 40))) for _ in range(60)]
    return texts + ["ACGTNNACGTAC", "acgtac", "ACGTAC GTACGT", "ACGTXACGTACGT", "ACGTAC<mask>ACGTAC", " ACGT  "]


def saprot_texts(rng: random.Random) -> list[str]:
    texts = ["".join(rng.choice(SAPROT_RESIDUES) + rng.choice(SAPROT_STRUCTURE) for _ in range(rng.randint(0, 25)))
             for _ in range(60)]
    return texts + ["MdEvVpQp", "M#EvV#", "MdE<mask>Vp", "MEVQ", "Md Ev", "MdEvX"]


@pytest.mark.parametrize("layout", ["nucleotide-transformer", "nucleotide-transformer-no-eos", "saprot"])
def test_tokenizer_and_model_equal_transformers(layout, tmp_path):
    vocab = SAPROT_VOCAB if layout == "saprot" else NT_VOCAB
    extra = {"eos_token": None} if layout.endswith("no-eos") else {}
    model, reference = write_esm_directory(tmp_path, vocab, **extra)
    texts = (saprot_texts if layout == "saprot" else dna_texts)(random.Random(0))
    ours = read_hf_tokenizer(tmp_path)
    assert isinstance(ours, BPETokenizer) and ours.get_vocab() == reference.get_vocab()
    assert ours.spacing.mode == "none"  # these vocabularies read plain text
    for special in (True, False):
        expected = reference(texts, add_special_tokens=special)["input_ids"]
        assert [ids.tolist() for ids in ours.encode_batch(texts, add_special_tokens=special)] == expected
    for ids in reference(texts[:20])["input_ids"]:
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == reference.decode(ids, skip_special_tokens=skip)
    loaded = Model.load(tmp_path)
    assert loaded.tokenizer.encode(texts[0]) == reference(texts[0])["input_ids"]
    batch = reference(texts[:8], padding=True, return_tensors="pt")
    with torch.no_grad():
        theirs = model(**batch).logits
        mine = loaded.network(batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    real = batch["attention_mask"].bool()
    assert (mine - theirs)[real].abs().max() <= 1e-5
    ours.save(tmp_path / "saved")  # biotf's save: transformers reads it back with the same ids
    again = transformers.AutoTokenizer.from_pretrained(tmp_path / "saved")
    assert again(texts)["input_ids"] == reference(texts)["input_ids"]
    assert load_tokenizer(tmp_path / "saved").fingerprint == ours.fingerprint


def test_an_esm_2_vocabulary_stays_the_protein_tokenizer(tmp_path):
    write_esm_directory(tmp_path, list(AminoAcidTokenizer().get_vocab()))
    assert isinstance(Model.load(tmp_path).tokenizer, AminoAcidTokenizer)
