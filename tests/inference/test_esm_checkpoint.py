"""Hugging Face ESM directories via `Model.load`: the model, and vocab.txt mapped onto the protein tokenizer."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from biotf.api import Model
from biotf.errors import CheckpointError, ConfigError, InputError
from biotf.tokenizers import AminoAcidTokenizer

PROTEINS = ["MKTAYIAKQRQISFVKSHFSRQ", "MA<mask>LLK", "GSHMSEQ<mask>VRWAAL"]


def test_model_load_reads_model_and_vocab_txt(esm2_checkpoint):
    transformers = pytest.importorskip("transformers")
    directory, hf = esm2_checkpoint
    loaded = Model.load(directory)
    model, tokenizer = loaded.network, loaded.tokenizer
    assert isinstance(tokenizer, AminoAcidTokenizer)
    reference = transformers.EsmTokenizer.from_pretrained(directory)
    encoded = reference(PROTEINS, padding=True, return_tensors="pt")
    ids = [tokenizer.encode(protein) for protein in PROTEINS]
    assert ids == [row[row != reference.pad_token_id].tolist() for row in encoded["input_ids"]]
    with torch.no_grad():
        ours = model(encoded["input_ids"], attention_mask=encoded["attention_mask"]).logits
        theirs = hf(**encoded).logits
    assert (ours - theirs)[encoded["attention_mask"].bool()].abs().max().item() <= 1e-4


def copy_with_vocab(source, target, tokens):
    shutil.copytree(source, target)
    (target / "vocab.txt").write_text("\n".join(tokens) + "\n")
    return target


def test_a_vocabulary_with_other_ids_reads_as_transformers_reads_it_and_one_too_long_is_refused(esm2_checkpoint,
                                                                                                 tmp_path):
    """A vocab.txt that is not ESM-2's layout is the checkpoint's own (Nucleotide Transformer, SaProt): its ids are
    those of transformers' EsmTokenizer, not biotf's protein tokenizer's; one longer than the embedding is refused."""
    from transformers import AutoTokenizer

    directory, _ = esm2_checkpoint
    tokens = (directory / "vocab.txt").read_text().split()
    swapped = tokens.copy()
    swapped[4], swapped[5] = swapped[5], swapped[4]  # L and A exchanged
    swapped_directory = copy_with_vocab(directory, tmp_path / "swapped", swapped)
    tokenizer = Model.load(swapped_directory).tokenizer
    reference = AutoTokenizer.from_pretrained(str(swapped_directory))
    assert list(tokenizer.encode("LAK")) == reference("LAK")["input_ids"] == [0, 5, 4, 15, 2]
    with pytest.raises(CheckpointError, match="the tokenizer has 34 tokens but the model's embedding only 33 rows"):
        Model.load(copy_with_vocab(directory, tmp_path / "longer", tokens + ["<extra>"]))
    missing = shutil.copytree(directory, tmp_path / "missing")
    (missing / "vocab.txt").unlink()
    with pytest.raises(InputError, match="has no tokenizer files: biotf reads tokenizer.json, vocab.txt"):
        Model.load(missing)


def test_other_heads_and_generation_are_refused(esm2_checkpoint, tmp_path):
    directory, _ = esm2_checkpoint
    with pytest.raises(CheckpointError, match=r"model_type 'esm'.*text generation \(supported: qwen2"):
        Model.load(directory, for_generation=True)
    folding = shutil.copytree(directory, tmp_path / "folding")
    config = json.loads((folding / "config.json").read_text())
    (folding / "config.json").write_text(json.dumps({**config, "architectures": ["EsmForProteinFolding"]}))
    with pytest.raises(CheckpointError, match="EsmForProteinFolding.*not EsmForMaskedLM \\| EsmModel"):
        Model.load(folding)


@pytest.mark.parametrize("architecture", ["EsmModel", "EsmForSequenceClassification", "EsmForTokenClassification"])
def test_model_load_reads_the_encoder_of_checkpoints_without_lm_head(architecture, esm_encoder_checkpoints):
    transformers = pytest.importorskip("transformers")
    directory, hf = esm_encoder_checkpoints[architecture]
    loaded = Model.load(directory)
    model, tokenizer = loaded.network, loaded.tokenizer
    assert isinstance(tokenizer, AminoAcidTokenizer) and not model.config.lm_head
    encoded = transformers.EsmTokenizer.from_pretrained(directory)(PROTEINS, padding=True, return_tensors="pt")
    encoder = hf if architecture == "EsmModel" else hf.esm
    with torch.no_grad():
        ours = model.encode(encoded["input_ids"], attention_mask=encoded["attention_mask"]).last_hidden_state
        theirs = encoder(**encoded).last_hidden_state
    assert (ours - theirs)[encoded["attention_mask"].bool()].abs().max().item() <= 1e-5
    with pytest.raises(ConfigError, match="lm_head=False: this model has no language-model head"):
        model(encoded["input_ids"], attention_mask=encoded["attention_mask"])
