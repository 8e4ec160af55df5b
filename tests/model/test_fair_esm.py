"""fair-esm `.pt` checkpoints, written by fair-esm's own code in the layout `esm.pretrained` downloads (prefixed
tensor names; `cfg` for ESM-2, `args` for ESM-1b / ESM-1v, each an `argparse.Namespace`), load into biotf with the
logits and every layer's representation of the model fair-esm's own loader builds from the same file (1e-5), read
with `weights_only=True`; other fair-esm architectures and foreign tensors are refused in one line."""

from __future__ import annotations

import argparse

import pytest
import torch

from biotf import Model
from biotf.errors import CheckpointError
from biotf.model import Transformer
from biotf.tokenizers import AminoAcidTokenizer

esm = pytest.importorskip("esm")
TOLERANCE = 1e-5
SEQUENCES = ["MKTAYIAKQRQISFVKSHFSRQLEERLG", "MSTNPKPQ<mask>KTKRNTN", "GGLIEVQ"]


def randomised(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    """fair-esm initialises norms to 1 and many biases to 0: random values make a wrong mapping show."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            parameter.normal_(1.0 if "norm" in name and name.endswith("weight") else 0.0, 0.3)
    return model.eval()


def esm2(token_dropout: bool = True):
    alphabet = esm.Alphabet.from_architecture("ESM-1b")
    model = randomised(esm.ESM2(num_layers=2, embed_dim=32, attention_heads=4, alphabet=alphabet,
                                token_dropout=token_dropout), seed=1)
    settings = argparse.Namespace(encoder_layers=2, encoder_embed_dim=32, encoder_attention_heads=4,
                                  token_dropout=token_dropout)
    return model, {"cfg": {"model": settings}}


def esm1b(embed_norm: bool = True):
    alphabet = esm.Alphabet.from_architecture("ESM-1b")
    settings = dict(arch="roberta_large", layers=2, embed_dim=32, ffn_embed_dim=48, attention_heads=4,
                    max_positions=40, token_dropout=True, emb_layer_norm_before=embed_norm)
    model = randomised(esm.ProteinBertModel(argparse.Namespace(**settings), alphabet), seed=2)
    published = {("encoder_" + key if key in ("layers", "embed_dim", "ffn_embed_dim", "attention_heads") else key):
                 value for key, value in settings.items()}
    return model, {"args": argparse.Namespace(**published)}


def save_published(model: torch.nn.Module, extra: dict, path) -> None:
    """torch.save in the published layout: the LM head under `encoder.`, the rest under `encoder.sentence_encoder.`."""
    state = {("encoder." if name.startswith("lm_head") else "encoder.sentence_encoder.") + name: tensor
             for name, tensor in model.state_dict().items()}
    torch.save({"model": state, **extra}, path)


def fair_esm_reference(path, name: str):
    """The model fair-esm's loader builds from the file (trusted here: the test wrote it)."""
    model, alphabet = esm.pretrained.load_model_and_alphabet_core(name, torch.load(path, weights_only=False))
    return model.eval(), alphabet


@pytest.mark.parametrize("layout", ["esm2", "esm2-no-token-dropout", "esm1b", "esm1b-no-embed-norm"])
def test_a_fair_esm_file_loads_equal_to_fair_esms_forward(layout, tmp_path):
    build = {"esm2": lambda: esm2(), "esm2-no-token-dropout": lambda: esm2(False), "esm1b": lambda: esm1b(),
             "esm1b-no-embed-norm": lambda: esm1b(False)}[layout]
    written, extra = build()
    name = ("esm2_t2_tiny" if layout.startswith("esm2") else "esm1b_t2_tiny")
    path = tmp_path / f"{name}.pt"
    save_published(written, extra, path)
    reference, alphabet = fair_esm_reference(path, name)
    _, _, tokens = alphabet.get_batch_converter()([(str(i), s) for i, s in enumerate(SEQUENCES)])
    ours = Transformer.from_hf(path)
    assert ours.config.pos == ("rope" if layout.startswith("esm2") else "learned")
    real = tokens != alphabet.padding_idx
    with torch.no_grad():
        theirs = reference(tokens, repr_layers=list(range(3)))
        mine = ours(tokens, attention_mask=real.long(), output_hidden_states=True)
    assert (mine.logits - theirs["logits"])[real].abs().max() <= TOLERANCE
    for layer in range(3):
        assert (mine.hidden_states[layer] - theirs["representations"][layer])[real].abs().max() <= TOLERANCE
    # The tokenizer is fair-esm's alphabet: `Model.load` reads the file as any other source.
    model = Model.load(path)
    assert isinstance(model.tokenizer, AminoAcidTokenizer)
    assert model.tokenizer.encode(SEQUENCES[0]) == tokens[0, :len(SEQUENCES[0]) + 2].tolist()


def test_other_fair_esm_architectures_are_refused_naming_them(tmp_path):
    written, extra = esm1b()
    extra["args"].arch = "msa_transformer"
    save_published(written, extra, tmp_path / "msa.pt")
    with pytest.raises(CheckpointError, match="fair-esm architecture 'msa_transformer' is not one biotf reads"):
        Transformer.from_hf(tmp_path / "msa.pt")
    written, extra = esm2()
    state = {"encoder.sentence_encoder." + name: tensor for name, tensor in written.state_dict().items()}
    state["encoder.sentence_encoder.layers.0.self_attn.bias_k"] = torch.zeros(1, 1, 32)
    torch.save({"model": state, **extra}, tmp_path / "bias_kv.pt")
    with pytest.raises(CheckpointError, match="tensor layers.0.self_attn.bias_k has no counterpart"):
        Transformer.from_hf(tmp_path / "bias_kv.pt")
    torch.save({"weights": {}}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="is not a fair-esm checkpoint"):
        Transformer.from_hf(tmp_path / "other.pt")


class Payload:
    """Unpickling this object calls `Path(marker).touch()`: stands for any code an attacker picks."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return type(self.marker).touch, (self.marker,)


def test_a_fair_esm_file_holding_code_is_refused_with_nothing_run(tmp_path):
    """Only `argparse.Namespace` is allowed beside tensors: a payload in the settings never runs."""
    marker = tmp_path / "executed"
    written, extra = esm2()
    extra["cfg"]["model"].encoder_layers = Payload(marker)
    save_published(written, extra, tmp_path / "hostile.pt")
    torch.load(tmp_path / "hostile.pt", weights_only=False)  # the unsafe way really runs it
    assert marker.exists()
    marker.unlink()
    with pytest.raises(CheckpointError, match="hostile.pt as plain tensors.*could run code") as refused:
        Transformer.from_hf(tmp_path / "hostile.pt")
    assert not marker.exists() and len(str(refused.value).splitlines()) == 1


def test_the_contact_regression_beside_the_file_gives_fair_esms_contacts(tmp_path):
    """`esm.pretrained` downloads `<name>-contact-regression.pt` beside `<name>.pt`: biotf reads it as fair-esm's
    local loader does, and predicts fair-esm's contact maps."""
    written, extra = esm2()
    state = written.state_dict()
    regression = {name: state.pop(name) for name in list(state) if name.startswith("contact_head.")}
    torch.save({"model": {("encoder." if name.startswith("lm_head") else "encoder.sentence_encoder.") + name: tensor
                          for name, tensor in state.items()}, **extra}, tmp_path / "esm2_t2_tiny.pt")
    torch.save({"model": regression}, tmp_path / "esm2_t2_tiny-contact-regression.pt")
    reference, alphabet = esm.pretrained.load_model_and_alphabet_core(
        "esm2_t2_tiny", torch.load(tmp_path / "esm2_t2_tiny.pt", weights_only=False),
        torch.load(tmp_path / "esm2_t2_tiny-contact-regression.pt", weights_only=False))
    _, _, tokens = alphabet.get_batch_converter()([("p", SEQUENCES[0])])
    with torch.no_grad():
        expected = reference.eval().predict_contacts(tokens)[0].numpy()
    model = Model.load(tmp_path / "esm2_t2_tiny.pt")
    assert model.network.config.contact_head
    assert abs(model.contacts([SEQUENCES[0]])[0] - expected).max() <= TOLERANCE
