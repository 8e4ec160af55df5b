"""ESM-2's contact head: read from the checkpoint under every key form, kept through export and load, and applied
as transformers' `EsmForMaskedLM.predict_contacts` applies it (Rao et al. 2020: symmetrise, APC, regression)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from biotf.checkpoint import save_pretrained
from biotf.api import Model
from biotf.checkpoint.digest import content_crc32
from biotf.errors import CheckpointError, ConfigError
from biotf.model import Transformer, TransformerConfig
from biotf.model.heads import average_product_correct, predict_contacts, symmetrise
from biotf.tokenizers.amino_acid import AminoAcidTokenizer

from test_hf_esm import batch as esm_batch

pytest.importorskip("transformers")

TOLERANCE = 1e-5


def hf_contacts(hf, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    hf.set_attn_implementation("eager")
    with torch.no_grad():
        return hf.predict_contacts(ids, mask)


def assert_contacts_match(ours: list[torch.Tensor], theirs: torch.Tensor, mask: torch.Tensor) -> None:
    """HF's (B, T - 2, T - 2) maps hold each sequence's L x L residues first (<cls> dropped; <eos> and pads after)."""
    lengths = mask.sum(-1) - 2
    assert [tuple(m.shape) for m in ours] == [(n, n) for n in lengths.tolist()]
    for mine, reference, n in zip(ours, theirs, lengths.tolist()):
        assert mine.dtype == torch.float32
        assert (mine - reference[:n, :n]).abs().max().item() <= TOLERANCE
        torch.testing.assert_close(mine, mine.T, rtol=0, atol=1e-6)


def test_the_contact_head_is_read_and_predicts_as_hf(random_esm):
    hf = random_esm(query_key_std=0.3)
    with torch.no_grad():  # a head that counts: HF initialises it near zero
        hf.esm.contact_head.regression.weight.normal_(0.0, 2.0)
    model = Transformer.from_hf(hf)
    assert model.config.contact_head and model.num_parameters() == hf.num_parameters()
    ids, mask = esm_batch()
    assert_contacts_match(predict_contacts(model, ids, mask), hf_contacts(hf, ids, mask), mask)
    assert_contacts_match(model.predict_contacts(ids, mask), hf_contacts(hf, ids, mask), mask)  # the trunk's method
    alone = predict_contacts(model, ids[2:, :6], mask[2:, :6])[0]  # padding changes nothing, on either side
    torch.testing.assert_close(alone, predict_contacts(model, ids, mask)[2], rtol=0, atol=1e-6)
    left = predict_contacts(model, ids[2:].roll(8, dims=1), mask[2:].roll(8, dims=1))[0]
    torch.testing.assert_close(alone, left, rtol=0, atol=1e-6)


@pytest.mark.parametrize("form", ["esm.", "", "_orig_mod.esm."])
def test_every_key_form_of_the_head_is_read(form, tmp_path, random_esm):
    """HF's `esm.contact_head.regression.*`, a bare EsmModel's (and fair-esm's) `contact_head.regression.*`, and
    a torch.compile'd model's names."""
    hf = random_esm()
    hf.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    renamed = {form + name.removeprefix("esm."): tensor for name, tensor in weights.items() if name.startswith("esm.")}
    if form == "":
        config = (tmp_path / "config.json").read_text().replace('"EsmForMaskedLM"', '"EsmModel"')
        (tmp_path / "config.json").write_text(config)
    else:
        renamed.update({form.removesuffix("esm.") + name: tensor for name, tensor in weights.items()
                        if name.startswith("lm_head.")})
    save_file(renamed, tmp_path / "model.safetensors")
    model = Transformer.from_hf(tmp_path)
    assert model.config.contact_head
    torch.testing.assert_close(model.contact_head.regression.weight, hf.esm.contact_head.regression.weight)
    torch.testing.assert_close(model.contact_head.regression.bias, hf.esm.contact_head.regression.bias)


def test_a_checkpoint_without_the_head_loads_without_one(tmp_path, random_esm):
    hf = random_esm()
    hf.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    save_file({k: v for k, v in weights.items() if "contact_head" not in k}, tmp_path / "model.safetensors")
    model = Transformer.from_hf(tmp_path)
    assert not model.config.contact_head and model.contact_head is None
    with pytest.raises(ConfigError, match="contact_head=False: this model has no contact head"):
        predict_contacts(model, *esm_batch())


def test_the_head_survives_save_pretrained_and_model_load(tmp_path, random_esm):
    model = Transformer.from_hf(random_esm())
    ids, mask = esm_batch()
    before = predict_contacts(model, ids, mask)
    save_pretrained(model, AminoAcidTokenizer(), tmp_path / "export")
    loaded = Model.load(tmp_path / "export").network
    assert loaded.config.contact_head
    for a, b in zip(before, predict_contacts(loaded, ids, mask)):
        assert torch.equal(a, b)


def test_a_head_of_the_wrong_width_is_refused_naming_it(tmp_path, random_esm):
    save_pretrained(Transformer.from_hf(random_esm()), AminoAcidTokenizer(), tmp_path / "export")
    weights = load_file(tmp_path / "export" / "model.safetensors")
    weights["contact_head.regression.weight"] = weights["contact_head.regression.weight"][:, :-1].contiguous()
    save_file(weights, tmp_path / "export" / "model.safetensors")
    config = json.loads((tmp_path / "export" / "config.json").read_text())
    config["weights_crc32"] = content_crc32(dict(sorted(weights.items())))  # a consistent file, a wrong shape
    (tmp_path / "export" / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"contact_head.regression.weight has shape \(1, 11\), the config "
                                              r"implies \(1, 12\)"):
        Model.load(tmp_path / "export")


def test_apc_and_symmetrisation_are_hf_s():
    from transformers.models.esm.modeling_esm import average_product_correct as hf_apc, symmetrize

    maps = torch.rand(2, 3, 7, 7)
    torch.testing.assert_close(average_product_correct(symmetrise(maps)), hf_apc(symmetrize(maps)))


def test_maps_are_streamed_one_layer_at_a_time(monkeypatch):
    """The regression is accumulated per layer: a layer's maps are released before the next layer runs."""
    model = Transformer(TransformerConfig(vocab_size=33, d_model=32, n_layers=4, causal=False, contact_head=True))
    alive: list[int] = []
    original = Transformer.attention_maps

    def counting(self, *args):
        import weakref

        live = []
        for maps in original(self, *args):
            live.append(weakref.ref(maps))
            alive.append(sum(ref() is not None for ref in live))
            yield maps
            del maps

    monkeypatch.setattr(Transformer, "attention_maps", counting)
    ids = torch.randint(4, 29, (2, 12))
    predict_contacts(model, ids, torch.ones_like(ids))
    assert alive == [1, 1, 1, 1]
