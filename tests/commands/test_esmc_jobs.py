"""Every job on a Hugging Face ESM C directory (a tiny random `EsmcForMaskedLM` / `EsmcModel` with transformers'
EsmcTokenizer files), read with the directory's own tokenizer:
- `biotf embed`: HF's last hidden state mean-pooled over the residues (no <cls>, <eos>), ESM's extract.py convention;
- `biotf score`: the pseudo-log-likelihood equals the one-mask-per-forward loop on the transformers model, and
  masked-marginal equals Meier et al.'s log p(alt) - log p(wt) with the mutated positions masked in one forward;
- fine-tuning (full, frozen, LoRA) trains on it, and a LoRA run reloads as its trunk plus its adapter;
- `biotf export-model --hf esmc` writes a directory transformers loads with the same logits and token ids.
"""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
import torch

from biotf.cli import main
from biotf.io.embeddings import npz_text
from esmc_models import build_random_esmc, save_esmc_directory
from protein_batches import one_mask_per_forward_pll

transformers = pytest.importorskip("transformers")

PROTEINS = {"P1": "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ", "P2": "MSTNPKPQRKTKRNTNRRPQDVKFPGG", "P3": "MA"}
WILD_TYPE = PROTEINS["P1"]


@pytest.fixture(scope="module")
def esmc_directories(tmp_path_factory) -> dict[str, tuple]:
    """{architecture: (directory, transformers model, its tokenizer)}."""
    directories = {}
    for seed, architecture in enumerate(("EsmcForMaskedLM", "EsmcModel")):
        hf = build_random_esmc(architecture, seed=40 + seed)
        directory = save_esmc_directory(hf, tmp_path_factory.mktemp(architecture))
        directories[architecture] = (directory, hf, transformers.AutoTokenizer.from_pretrained(directory))
    return directories


@pytest.fixture(scope="module")
def esmc_to_fine_tune(tmp_path_factory):
    """An EsmcForMaskedLM at HF's initialisation scale, where a frozen random trunk still tells residues apart."""
    return save_esmc_directory(build_random_esmc(seed=42, weight_std=0.02), tmp_path_factory.mktemp("esmc-finetune"))


@pytest.fixture
def fasta(tmp_path):
    path = tmp_path / "proteins.fasta"
    path.write_text("".join(f">{name}\n{sequence}\n" for name, sequence in PROTEINS.items()))
    return path


@pytest.mark.parametrize("architecture", ["EsmcForMaskedLM", "EsmcModel"])
def test_embed_is_hf_last_hidden_state_mean_pooled_over_residues(architecture, esmc_directories, fasta, tmp_path,
                                                                  capsys):
    directory, hf, tokenizer = esmc_directories[architecture]
    output = tmp_path / "proteins.npz"
    status = main(["embed", "--no-progress", "--model", str(directory), "--input", str(fasta), "--output", str(output)])
    assert status == 0, capsys.readouterr().err
    exported = np.load(output)
    assert npz_text(exported, "ids").tolist() == list(PROTEINS)
    encoded = tokenizer(list(PROTEINS.values()), padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = getattr(hf, "esmc", hf)(**encoded).last_hidden_state
    special = torch.tensor(tokenizer.all_special_ids)
    residues = (encoded["attention_mask"].bool() & ~torch.isin(encoded["input_ids"], special))[..., None]
    expected = (hidden * residues).sum(1) / residues.sum(1)
    assert np.abs(exported["embeddings"] - expected.numpy()).max() <= 1e-5


def test_score_pll_and_masked_marginal_equal_the_transformers_loops(esmc_directories, fasta, tmp_path, capsys):
    directory, hf, tokenizer = esmc_directories["EsmcForMaskedLM"]
    status = main(["score", "--no-progress", "--model", str(directory), "--input", str(fasta), "--method", "pll",
                   "--output", str(tmp_path / "pll.csv")])
    assert status == 0, capsys.readouterr().err
    table = pd.read_csv(tmp_path / "pll.csv")
    assert table["residues"].tolist() == [len(sequence) for sequence in PROTEINS.values()]
    for sequence, value in zip(PROTEINS.values(), table["log_likelihood"], strict=True):
        ids = torch.tensor([tokenizer(sequence)["input_ids"]])
        assert abs(value - one_mask_per_forward_pll(hf, ids, tokenizer.mask_token_id)) <= 1e-4

    variants = tmp_path / "dms.csv"
    variants.write_text("mutant\nA4G\nK2R:I6L\n")
    single, double = [("A", 3, "G")], [("K", 1, "R"), ("I", 5, "L")]
    # masked-marginal: each mutated position masked on its own and summed (ProteinGym); -joint: all in one forward
    for method, expected in (("masked-marginal", [hf_masked_marginal(hf, tokenizer, single),
                                                  sum(hf_masked_marginal(hf, tokenizer, [m]) for m in double)]),
                             ("masked-marginal-joint", [hf_masked_marginal(hf, tokenizer, single),
                                                        hf_masked_marginal(hf, tokenizer, double)])):
        status = main(["score", "--no-progress", "--model", str(directory), "--variants", str(variants),
                       "--reference", WILD_TYPE, "--method", method, "--output", str(tmp_path / f"{method}.csv")])
        assert status == 0, capsys.readouterr().err
        scores = pd.read_csv(tmp_path / f"{method}.csv")
        assert np.abs(scores["score"].to_numpy() - expected).max() <= 1e-5


def hf_masked_marginal(hf, tokenizer, mutations: list[tuple[str, int, str]]) -> float:
    """Meier et al. 2021 on the transformers model: every residue of `mutations` (0-based) masked in one forward, the
    sum of log p(alt) - log p(wt) there (token = residue + 1, after <cls>)."""
    ids = torch.tensor([tokenizer(WILD_TYPE)["input_ids"]])
    for _, position, _ in mutations:
        ids[0, position + 1] = tokenizer.mask_token_id
    with torch.no_grad():
        table = torch.log_softmax(hf(input_ids=ids).logits[0].double(), -1)
    token = tokenizer.convert_tokens_to_ids
    return sum(table[p + 1, token(alt)].item() - table[p + 1, token(wt)].item() for wt, p, alt in mutations)


@pytest.mark.parametrize("mode", ["lora", "frozen", "full"])
def test_fine_tuning_trains_a_per_residue_classifier_on_esmc(mode, esmc_to_fine_tune, pretrained, tmp_path):
    """The `pretrained` fixture's labelled proteins, per-residue labels (H for AELMQKRH, else C), on the ESM C
    directory read as it is (init_from the Hugging Face directory)."""
    from safetensors.torch import load_file

    from biotf.api import Model
    from biotf.checkpoint.task_model import load_task_model
    from biotf.finetune.finetune_run import train_task
    from biotf.model.lora import load_adapter
    from training_helpers import finetune_config

    directory = esmc_to_fine_tune
    shutil.copytree(directory, tmp_path / "base")
    shutil.copy(pretrained / "labelled.csv", tmp_path / "labelled.csv")
    extra = ["finetune.lora.targets=[qkv,out,gate_up,down]"] if mode == "lora" else []
    summary = train_task(finetune_config(tmp_path, "data.label_column=ss", "task=token", f"finetune.mode={mode}",
                                         "finetune.monitor=accuracy", "optim.lr=3e-2" if mode == "frozen" else
                                         "optim.lr=3e-3", *extra), tmp_path / "run")
    assert summary.test["accuracy"] > 0.75, (mode, summary.test)
    base = Model.load(directory).network
    tuned = load_file(str(tmp_path / "run" / "model" / "model.safetensors"))
    changed = [name for name, tensor in base.state_dict().items() if not torch.equal(tuned[name], tensor)]
    assert (changed == []) == (mode == "frozen")
    if mode != "lora":
        return
    # rank 8 x (in + out) of qkv (32 -> 96), out (32 -> 32), gate_up (32 -> 128), down (64 -> 32), 3 blocks; head 66
    assert summary.trainable_parameters == 3 * 8 * (128 + 64 + 160 + 96) + 2 * 32 + 2
    load_adapter(base, tmp_path / "run" / "model" / "adapter.safetensors")
    model, tokenizer, _ = load_task_model(tmp_path / "run")
    ids = torch.tensor([tokenizer.encode(WILD_TYPE)])
    with torch.no_grad():
        torch.testing.assert_close(base.encode(ids).last_hidden_state, model.trunk.encode(ids).last_hidden_state,
                                   rtol=1e-5, atol=1e-5)


def test_export_model_hf_round_trips_esmc_through_transformers(esmc_directories, tmp_path, capsys):
    directory, hf, tokenizer = esmc_directories["EsmcForMaskedLM"]
    out = tmp_path / "exported"
    assert main(["export-model", str(directory), str(out), "--hf", "esmc"]) == 0, capsys.readouterr().err
    exported = transformers.AutoModelForMaskedLM.from_pretrained(out).eval()
    exported_tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert type(exported).__name__ == "EsmcForMaskedLM"
    texts = [*PROTEINS.values(), "MKT|GAV<mask>LXU"]
    assert [exported_tokenizer(t)["input_ids"] for t in texts] == [tokenizer(t)["input_ids"] for t in texts]
    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        difference = exported(**encoded).logits - hf(**encoded).logits
    assert difference[encoded["attention_mask"].bool()].abs().max() <= 1e-5
    capsys.readouterr()
    assert main(["export-model", str(out), str(tmp_path / "again"), "--hf"]) == 0, capsys.readouterr().err
    assert (tmp_path / "again" / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()
