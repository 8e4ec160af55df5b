"""`biotf embed` on a Hugging Face ESM-2 directory gives HF's last hidden state mean-pooled over the residues, for
EsmForMaskedLM and for the encoders without a masked-LM head (EsmModel, fine-tuned classifiers)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from biotf.cli import main
from biotf.io.embeddings import npz_text

PROTEINS = {"P1": "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ", "P2": "MSTNPKPQRKTKRNTNRRPQDVKFPGG", "P3": "MA"}


TOLERANCE = 1e-5  # max abs difference of float32 mean-pooled vectors


@pytest.mark.parametrize("architecture", ["EsmForMaskedLM", "EsmModel", "EsmForSequenceClassification",
                                          "EsmForTokenClassification"])
def test_embed_mean_pools_hf_last_hidden_state_over_residues(architecture, esm2_checkpoint, esm_encoder_checkpoints,
                                                             tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    directory, hf = esm2_checkpoint if architecture == "EsmForMaskedLM" else esm_encoder_checkpoints[architecture]
    encoder = hf if architecture == "EsmModel" else hf.esm
    fasta = tmp_path / "proteins.fasta"
    fasta.write_text("".join(f">{name}\n{sequence}\n" for name, sequence in PROTEINS.items()))
    output = tmp_path / "proteins.npz"
    status = main(["embed", "--no-progress", "--model", str(directory), "--input", str(fasta),
                   "--output", str(output)])
    assert status == 0, capsys.readouterr().err
    exported = np.load(output)
    assert npz_text(exported, "ids").tolist() == list(PROTEINS)

    tokenizer = transformers.EsmTokenizer.from_pretrained(directory)
    encoded = tokenizer(list(PROTEINS.values()), padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = encoder(**encoded).last_hidden_state
    special = torch.tensor(tokenizer.all_special_ids)
    residues = (encoded["attention_mask"].bool() & ~torch.isin(encoded["input_ids"], special))[..., None]
    expected = (hidden * residues).sum(1) / residues.sum(1)  # ESM's extract.py mean: residues, no <cls>/<eos>
    assert np.abs(exported["embeddings"] - expected.numpy()).max() <= TOLERANCE
