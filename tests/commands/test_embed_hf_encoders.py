"""`biotf embed` + `biotf probe` on Hugging Face encoder directories with their own tokenizers: a ChemBERTa-style
RoBERTa (byte-level BPE trained on SMILES) on ESOL, the README's example, and a ProtBert-style BERT (WordPiece over
space-separated residues). The vectors are HF's last hidden state mean-pooled over content tokens (not <s>, </s>,
[CLS], [SEP]), on transformers' own tokenization of each record; `Model.load` reads the directory whole."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch

from biotf.cli import main
from biotf.io.embeddings import npz_text
from hf_tokenizer_dirs import write_tokenizer

transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-5  # max abs difference of float32 mean-pooled vectors
ESOL_LABEL = "measured log solubility in mols per litre"


def random_encoder_directory(random_encoder, kind: str, directory, texts, seed: int):
    """A tiny random `kind` ("roberta" / "protbert") masked LM saved with its tokenizer, sized to its vocabulary."""
    write_tokenizer(kind, directory, texts)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    hf = random_encoder("roberta" if kind == "roberta" else "bert", seed=seed, max_positions=160,
                        vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    hf.save_pretrained(directory)
    return hf, tokenizer


def hf_mean_embeddings(hf, tokenizer, texts: list[str]) -> np.ndarray:
    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = getattr(hf, hf.base_model_prefix)(**encoded).last_hidden_state
    content = (encoded["attention_mask"].bool() & ~torch.isin(encoded["input_ids"],
                                                                torch.tensor(tokenizer.all_special_ids)))[..., None]
    return ((hidden * content).sum(1) / content.sum(1)).numpy()


@pytest.mark.slow  # a BPE trained, 300 molecules embedded, a 5-fold probe beside Morgan fingerprints
def test_chemberta_style_roberta_embeds_esol_as_hf_and_probes_it(random_encoder, repo_root, tmp_path, capsys):
    with open(repo_root / "data" / "molnet_esol.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))[:300]  # the shipped ESOL sample's first 300 molecules: seconds, not minutes
    esol = tmp_path / "esol.csv"
    with open(esol, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    smiles = [row["smiles"].strip() for row in rows]  # as biotf's reader gives them (counted: whitespace_stripped)
    directory = tmp_path / "ChemBERTa-tiny"
    hf, tokenizer = random_encoder_directory(random_encoder, "roberta", directory, smiles, seed=31)

    from biotf.api import Model

    loaded = Model.load(directory)
    model, biotf_tokenizer = loaded.network, loaded.tokenizer
    assert model.config.position_offset == tokenizer.pad_token_id + 1
    assert biotf_tokenizer.encode(smiles[0]) == tokenizer(smiles[0])["input_ids"]
    encoded = tokenizer(smiles[:4], padding=True, return_tensors="pt")  # right-padded, with its attention mask
    with torch.no_grad():
        ours = model(encoded["input_ids"], attention_mask=encoded["attention_mask"], output_hidden_states=True)
        theirs = hf(**encoded, output_hidden_states=True)
    real = encoded["attention_mask"].bool()
    for mine, reference in zip((*ours.hidden_states, ours.logits), (*theirs.hidden_states, theirs.logits), strict=True):
        assert (mine - reference)[real].abs().max() <= TOLERANCE

    output = tmp_path / "esol.npz"
    status = main(["embed", "--no-progress", "--model", str(directory), "--input", str(esol), "--column", "smiles",
                   "--id-column", "Compound ID", "--output", str(output)])
    assert status == 0, capsys.readouterr().err
    exported = np.load(output)
    assert npz_text(exported, "ids").tolist() == [row["Compound ID"].strip() for row in rows]
    some = list(range(0, len(rows), 23))
    expected = hf_mean_embeddings(hf, tokenizer, [smiles[i] for i in some])
    assert np.abs(exported["embeddings"][some] - expected).max() <= TOLERANCE

    # The embeddings' tokenizer is a BPE, no sequence kind, so probe's baseline is named: Morgan fingerprints.
    pytest.importorskip("rdkit")
    capsys.readouterr()
    status = main(["probe", "--embeddings", str(output), "--label", ESOL_LABEL, "--baseline", "smiles"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert "model (mean pool) embeddings" in captured.out and "RMSE" in captured.out, captured.out


def test_protbert_style_bert_embeds_proteins_as_hf(random_encoder, repo_root, tmp_path, capsys):
    proteins = {"P1": "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ", "P2": "MSTNPKPQRKTKRNTNRRPQDVKFPGG", "P3": "MA"}
    directory = tmp_path / "ProtBert-tiny"
    hf, tokenizer = random_encoder_directory(random_encoder, "protbert", directory, [], seed=32)
    # ProtBert reads residues separated by spaces (biotf inserts none): the input holds them so, as HF users give it.
    table = tmp_path / "proteins.csv"
    table.write_text("id,sequence\n" + "".join(f"{name},{' '.join(seq)}\n" for name, seq in proteins.items()))
    output = tmp_path / "proteins.npz"
    status = main(["embed", "--no-progress", "--model", str(directory), "--input", str(table), "--column",
                   "sequence", "--id-column", "id", "--output", str(output)])
    assert status == 0, capsys.readouterr().err
    exported = np.load(output)
    expected = hf_mean_embeddings(hf, tokenizer, [" ".join(sequence) for sequence in proteins.values()])
    assert np.abs(exported["embeddings"] - expected).max() <= TOLERANCE
