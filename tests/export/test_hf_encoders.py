"""The encoder families read from Hugging Face directories (BERT, RoBERTa, ESM-1b with absolute positions, ALBERT)
serve biotf's encoder tools: `biotf embed`'s Embedder gives HF's last hidden state mean-pooled over each record's
content tokens, the Scorer's pseudo-log-likelihood equals HF's one-mask-per-forward loop, and fine-tuning trains them
(through biotf's export format: the family's switches survive save_pretrained / Model.load).

The models are tiny random `transformers` models over the ids of biotf's protein tokenizer (ESM's vocabulary), so that
the tokenizer side is biotf's own; the CLI on a directory with the family's own tokenizer files is tested where those
readers live.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from biotf.io.readers import Record
from biotf.export.embed import EmbedOptions, Embedder
from biotf.model import Transformer
from biotf.scoring.scorer import Scorer
from biotf.tokenizers import AminoAcidTokenizer
from protein_batches import one_mask_per_forward_pll

transformers = pytest.importorskip("transformers")

PROTEINS = ["MKTAYIAKQRQISFVKSHFSRQ", "GAVLIPF", "MKWVTFISLLFLFSSAYS", "MEEPQSDPSV"]
FAMILIES = ("bert", "roberta", "esm-absolute", "albert")


@pytest.fixture(scope="module", params=FAMILIES)
def encoder(request, tmp_path_factory, random_esm, random_encoder):
    """(family, HF model, biotf model loaded from its saved directory, tokenizer)."""
    if request.param == "esm-absolute":
        hf = random_esm(token_dropout=False, position="absolute", embed_norm=True, seed=21)
    elif request.param == "albert":  # factorised embeddings (16 under 32), one layer shared by three
        torch.manual_seed(21)
        hf = transformers.AlbertForMaskedLM(transformers.AlbertConfig(
            vocab_size=AminoAcidTokenizer().vocab_size, embedding_size=16, hidden_size=32, num_hidden_layers=3,
            num_attention_heads=4, intermediate_size=48, max_position_embeddings=64)).eval()
    else:
        hf = random_encoder(request.param, seed=21, max_positions=64)
    directory = tmp_path_factory.mktemp(request.param)
    hf.save_pretrained(directory)
    return request.param, hf, Transformer.from_hf(directory), AminoAcidTokenizer()


def trunk(hf):
    return getattr(hf, hf.base_model_prefix)


def test_embeddings_are_hf_last_hidden_state_mean_pooled_over_content_tokens(encoder):
    _, hf, model, tokenizer = encoder
    records = [Record(f"p{i}", sequence, {}, i) for i, sequence in enumerate(PROTEINS)]
    embedded = list(Embedder(model, tokenizer, EmbedOptions(pool="mean")).embed(records))
    for item, sequence in zip(embedded, PROTEINS, strict=True):
        ids = torch.tensor([tokenizer.encode(sequence)])  # <cls> residues <eos>, each record alone
        with torch.no_grad():
            hidden = trunk(hf)(ids).last_hidden_state[0]
        expected = hidden[1:-1].mean(0).numpy()  # the content tokens: specials are not pooled
        assert np.abs(item.vectors[-1] - expected).max() <= 1e-5


def test_pseudo_log_likelihood_equals_the_transformers_loop(encoder):
    _, hf, model, tokenizer = encoder
    scores = Scorer(model, tokenizer).sequence_scores(PROTEINS[:2], "pll")
    for sequence, score in zip(PROTEINS, scores):
        expected = one_mask_per_forward_pll(hf, torch.tensor([tokenizer.encode(sequence)]), tokenizer.mask_id)
        assert score.scored_tokens == len(sequence)
        assert abs(score.log_likelihood - expected) <= 1e-4


def test_fine_tuning_trains_a_per_residue_classifier_on_the_loaded_encoder(encoder, pretrained, tmp_path):
    """The `pretrained` fixture's labelled proteins, per-residue labels (H for AELMQKRH, else C: a function of the
    residue), with this family's model as the trunk, trained whole (mode full)."""
    from safetensors.torch import load_file

    from biotf.checkpoint import save_pretrained
    from biotf.finetune.finetune_run import train_task
    from training_helpers import finetune_config

    family, _, model, tokenizer = encoder
    save_pretrained(model, tokenizer, tmp_path / "base")
    shutil.copy(pretrained / "labelled.csv", tmp_path / "labelled.csv")
    summary = train_task(finetune_config(tmp_path, "data.label_column=ss", "task=token", "finetune.mode=full",
                                         "finetune.monitor=accuracy", "data.max_length=48"), tmp_path / "run")
    assert summary.test["accuracy"] > 0.75, (family, summary.test)
    base = load_file(str(tmp_path / "base" / "model.safetensors"))
    tuned = load_file(str(tmp_path / "run" / "model" / "model.safetensors"))
    assert tuned.keys() == base.keys() and not torch.equal(tuned["embed.weight"], base["embed.weight"])
