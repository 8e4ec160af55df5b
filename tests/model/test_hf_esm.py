"""ESM parity: biotf loads transformers' EsmForMaskedLM checkpoints and computes what they compute.

Compared over real tokens (attention_mask 1): HF zeroes padded positions' embeddings and gives them their own
position ids, so padded rows of the two models differ by design; no real token ever attends to them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from safetensors.torch import load_file, save_file

from biotf.errors import CheckpointError, ConfigError
from biotf.model import Transformer, TransformerConfig
from protein_batches import MASK, PAD
from protein_batches import masked_protein_batch as batch

transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-4  # max abs difference of float32 logits and hidden states


def max_diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    return (a - b)[mask.bool()].abs().max().item()


def assert_parity(model: Transformer, hf, inputs: tuple[torch.Tensor, torch.Tensor] | None = None,
                  tolerance: float = TOLERANCE) -> None:
    ids, mask = inputs or batch()
    labels = torch.where(ids == MASK, torch.randint(4, 29, ids.shape), -100)
    with torch.no_grad():
        ours = model(ids, attention_mask=mask, labels=labels, output_hidden_states=True)
        plain = model(ids, attention_mask=mask).logits
        theirs = hf(ids, attention_mask=mask, labels=labels, output_hidden_states=True)
    assert max_diff(ours.logits, theirs.logits, mask) <= tolerance
    assert max_diff(plain, theirs.logits, mask) <= tolerance  # the fused head + loss path and the plain one agree
    assert abs(ours.loss.item() - theirs.loss.item()) <= tolerance
    assert len(ours.hidden_states) == len(theirs.hidden_states) == model.config.n_layers + 1
    for mine, reference in zip(ours.hidden_states, theirs.hidden_states):
        assert max_diff(mine, reference, mask) <= tolerance


@pytest.mark.parametrize("token_dropout, tied", [(True, True), (False, True), (True, False)])
def test_saved_esm2_directory_matches_hf(token_dropout, tied, tmp_path, random_esm):
    hf = random_esm(token_dropout, tied)
    hf.save_pretrained(tmp_path)
    model = Transformer.from_hf(tmp_path)
    config = model.config
    assert (config.pos, config.causal, config.token_dropout, config.tie_embeddings) == ("rope", False, token_dropout,
                                                                                         tied)
    assert config.lm_head_transform and config.lm_head_bias and config.norm_position == "pre"
    assert config.contact_head  # EsmForMaskedLM's contact regression is read too (tests/model/test_contacts.py)
    assert model.num_parameters() == hf.num_parameters()
    assert_parity(model, hf)


@pytest.mark.parametrize("legacy_names", [False, True], ids=["weight-bias", "gamma-beta"])
def test_model_object_and_pickled_bin_directory_load_alike(legacy_names, tmp_path, random_esm):
    """The older hub layout, read weights_only=True; with LayerNorm gamma / beta names too, which `transformers`
    renames on load: equal to the model it loads from the same directory."""
    hf = random_esm(token_dropout=True, seed=3)
    hf.config.save_pretrained(tmp_path)
    state = hf.state_dict()
    if legacy_names:
        state = {name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"):
                 tensor for name, tensor in state.items()}
        assert sum(name.endswith("LayerNorm.gamma") for name in state) > 0
    torch.save(state, tmp_path / "pytorch_model.bin")
    assert_parity(Transformer.from_hf(tmp_path), transformers.EsmForMaskedLM.from_pretrained(tmp_path).eval(),
                  tolerance=1e-5)
    assert_parity(Transformer.from_hf(tmp_path), hf)
    assert_parity(Transformer.from_hf(hf), hf)


def test_esm1b_absolute_positions_load_as_a_learned_table(tmp_path, random_esm):
    # ESM-1b: absolute positions numbered from pad id + 1, a LayerNorm on the embeddings, token dropout.
    hf = random_esm(token_dropout=True, position="absolute", embed_norm=True, seed=4)
    hf.save_pretrained(tmp_path)
    model = Transformer.from_hf(tmp_path)
    assert (model.config.pos, model.config.max_seq_len, model.config.embed_norm) == ("learned", 66 - PAD - 1, True)
    assert_parity(model, hf)


def test_token_dropout_zeroes_masks_and_rescales_by_the_observed_ratio(random_esm):
    model = Transformer.from_hf(random_esm(token_dropout=True))
    ids, mask = batch()
    with torch.no_grad():
        embedded = model(ids, attention_mask=mask, output_hidden_states=True).hidden_states[0]
    table = model.embed.weight.detach()
    for row in range(ids.shape[0]):
        real = int(mask[row].sum())
        masked = int((ids[row] == MASK).sum())
        scale = (1 - 0.15 * 0.8) / (1 - masked / real)
        expected = torch.where((ids[row] == MASK)[:, None], 0.0, table[ids[row]] * scale)
        torch.testing.assert_close(embedded[row, :real], expected[:real])


def edit_config(directory: Path, **changes) -> None:
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, **changes}))


def test_what_biotf_cannot_compute_is_refused_clearly(tmp_path, random_esm):
    hf = random_esm(token_dropout=False)
    hf.save_pretrained(tmp_path / "relative")
    edit_config(tmp_path / "relative", position_embedding_type="relative_key")
    with pytest.raises(CheckpointError, match=r"position_embedding_type='relative_key'.*rotary \| absolute"):
        Transformer.from_hf(tmp_path / "relative")
    hf.save_pretrained(tmp_path / "decoder")
    edit_config(tmp_path / "decoder", is_decoder=True)
    with pytest.raises(CheckpointError, match="is_decoder=True is not supported"):
        Transformer.from_hf(tmp_path / "decoder")
    hf.save_pretrained(tmp_path / "folding")
    edit_config(tmp_path / "folding", architectures=["EsmForProteinFolding"])
    with pytest.raises(CheckpointError, match=r"architectures=\['EsmForProteinFolding'\].*EsmForMaskedLM \| EsmModel"):
        Transformer.from_hf(tmp_path / "folding")
    hf.save_pretrained(tmp_path / "headless")  # says EsmForMaskedLM, but its lm_head tensors are gone
    weights = load_file(tmp_path / "headless" / "model.safetensors")
    save_file({k: v for k, v in weights.items() if not k.startswith("lm_head.")},
              tmp_path / "headless" / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="no masked-LM head.*set architectures to EsmModel"):
        Transformer.from_hf(tmp_path / "headless")


# --- rotary frequencies as real checkpoints store them ---------------------------------------------------------
# Official ESM-2 checkpoints were trained in float16 and store their rotary inverse frequencies rounded to it; HF
# computes with the stored values. transformers has written them under three names.
INV_FREQ_NAMES = {
    "transformers 5 save_pretrained": ["esm.encoder.layer.*.attention.self.rotary_embeddings.inv_freq"],
    "official, one per layer": [f"esm.encoder.layer.{i}.attention.self.rotary_embeddings.inv_freq" for i in range(3)],
    "shared": ["esm.rotary_embeddings.inv_freq"],
}


def long_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Three proteins of 420, 300 and 130 tokens, right-padded, with <mask> tokens: rounding of a frequency
    shifts the rotation angle in proportion to the position, so short fixtures cannot see it. (With sharp attention,
    query_key_std=0.5, recomputed frequencies miss HF by 1.1e-3 in the logits and 1.7e-2 in the hidden states here;
    the stored ones match to 2e-7 and 1e-6.)"""
    generator = torch.Generator().manual_seed(2)
    lengths = (420, 300, 130)
    ids = torch.randint(4, 29, (len(lengths), lengths[0]), generator=generator)
    ids[:, 0] = 0
    for row, length in enumerate(lengths):
        ids[row, length - 1] = 2
        ids[row, length:] = PAD
        ids[row, torch.randint(1, length - 1, (length // 10,), generator=generator)] = MASK
    return ids, (ids != PAD).long()


def save_with_rounded_frequencies(hf, directory: Path, names: list[str]) -> torch.Tensor:
    """Round `hf`'s inverse frequencies through float16 (as official ESM-2 stores them), save it, and store them
    under `names` only. Returns the rounded values."""
    buffer = hf.esm.rotary_embeddings.inv_freq
    rounded = buffer.half().float()
    assert not torch.equal(rounded, buffer)  # head size 16, as ESM-2 8M: 0.31623 -> 0.31616, ...
    buffer.copy_(rounded)
    hf.save_pretrained(directory)
    weights = {k: v for k, v in load_file(directory / "model.safetensors").items() if "inv_freq" not in k}
    save_file({**weights, **{name: rounded.clone() for name in names}}, directory / "model.safetensors", metadata={"format": "pt"})
    return rounded


@pytest.mark.parametrize("names", INV_FREQ_NAMES.values(), ids=INV_FREQ_NAMES.keys())
def test_stored_float16_rounded_frequencies_are_used_over_long_sequences(names, tmp_path, random_esm):
    hf = random_esm(token_dropout=True, hidden_size=64, max_positions=1026, seed=7, query_key_std=0.5)
    rounded = save_with_rounded_frequencies(hf, tmp_path, names)
    model = Transformer.from_hf(tmp_path)
    assert torch.equal(model.positions.inverse_frequency, rounded)
    assert_parity(model, hf, long_batch())


def test_rounded_frequencies_survive_export_dtype_casts_and_old_state_dicts(tmp_path, random_esm):
    from biotf.checkpoint import save_pretrained
    from biotf.api import Model
    from biotf.tokenizers import AminoAcidTokenizer

    hf = random_esm(token_dropout=True, hidden_size=64, max_positions=1026, seed=8, query_key_std=0.5)
    rounded = save_with_rounded_frequencies(hf, tmp_path / "hf", INV_FREQ_NAMES["shared"])
    model = Transformer.from_hf(tmp_path / "hf")
    save_pretrained(model, AminoAcidTokenizer(), tmp_path / "exported")
    reloaded = Model.load(tmp_path / "exported").network
    assert torch.equal(reloaded.positions.inverse_frequency, rounded)
    assert_parity(reloaded, hf, long_batch())
    # A dtype cast moves the frequencies with the model but keeps them float32 and unrounded.
    assert torch.equal(reloaded.to(torch.bfloat16).float().positions.inverse_frequency, rounded)
    # A state dict from before the buffer existed loads with frequencies computed from rope_theta.
    old = {k: v for k, v in model.state_dict().items() if k != "positions.inverse_frequency"}
    fresh = Transformer(model.config)
    fresh.load_state_dict(old, strict=True)
    exact = 1.0 / 10000.0 ** (torch.arange(0, 16, 2).float() / 16)
    assert torch.equal(fresh.positions.inverse_frequency, exact)


def test_frequencies_that_disagree_between_layers_are_refused(tmp_path, random_esm):
    hf = random_esm(token_dropout=False, seed=9)
    save_with_rounded_frequencies(hf, tmp_path, INV_FREQ_NAMES["official, one per layer"])
    weights = load_file(tmp_path / "model.safetensors")
    weights["esm.encoder.layer.2.attention.self.rotary_embeddings.inv_freq"] *= 1.001
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="different rotary inverse frequencies.*layer.0.*layer.2"):
        Transformer.from_hf(tmp_path)


# --- encoders without a masked-LM head ---------------------------------------------------------------------------
@pytest.mark.parametrize("architecture", ["EsmModel", "EsmForSequenceClassification", "EsmForTokenClassification"])
def test_encoder_checkpoints_without_lm_head_load_their_trunk(architecture, esm_encoder_checkpoints):
    directory, hf = esm_encoder_checkpoints[architecture]
    model = Transformer.from_hf(directory)
    assert not model.config.lm_head and model.lm_head is None and model.head_transform is None
    encoder = hf if architecture == "EsmModel" else hf.esm
    pooler = 32 * 32 + 32 if architecture == "EsmModel" else 0  # the dense layer of EsmModel's pooler
    assert model.config.contact_head  # every ESM encoder carries the contact regression, read with it
    assert model.num_parameters() == encoder.num_parameters() - pooler
    ids, mask = batch()
    with torch.no_grad():
        ours = model.encode(ids, attention_mask=mask, output_hidden_states=True)
        theirs = encoder(ids, attention_mask=mask, output_hidden_states=True)
    assert max_diff(ours.last_hidden_state, theirs.last_hidden_state, mask) <= TOLERANCE
    for mine, reference in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        assert max_diff(mine, reference, mask) <= TOLERANCE
    with pytest.raises(ConfigError, match="no language-model head.*encode\\(\\) and `biotf embed` work"):
        model(ids, attention_mask=mask)


# --- writing ESM checkpoints (to_hf) -----------------------------------------------------------------------------
@pytest.mark.parametrize("position, tied", [("absolute", True), ("absolute", False), ("rotary", True)])
def test_to_hf_writes_an_esm_directory_transformers_loads_with_the_same_outputs(position, tied, tmp_path, random_esm):
    # ESM-1b's absolute table is read whole: HF's rows 0..pad id serve padding only, real tokens read row p + pad + 1.
    hf = random_esm(token_dropout=True, tied=tied, position=position, embed_norm=position == "absolute", seed=11)
    hf.save_pretrained(tmp_path / "hf")
    model = Transformer.from_hf(tmp_path / "hf")
    assert model.config.position_offset == (PAD + 1 if position == "absolute" else 0)
    assert model.num_parameters() == hf.num_parameters()
    assert_parity(model, hf, tolerance=1e-5)
    model.to_hf(tmp_path / "written")
    import transformers

    reloaded = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "written", attn_implementation="sdpa")
    assert type(reloaded) is type(hf) and reloaded.config.position_embedding_type == position
    assert_parity(model, reloaded.eval(), tolerance=1e-5)
    again = Transformer.from_hf(tmp_path / "written")
    assert again.config == model.config
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), model.state_dict().values()))


def test_to_hf_refuses_what_esm_cannot_hold(tmp_path):
    with pytest.raises(CheckpointError, match="cannot write an ESM checkpoint: config norm_position='post'"):
        Transformer(TransformerConfig.preset("esm2-8m", norm_position="post")).to_hf(tmp_path, model_type="esm")
    with pytest.raises(CheckpointError, match="config position_offset=0, ESM numbers absolute positions from pad id"):
        Transformer(TransformerConfig.preset("esm2-8m", pos="learned")).to_hf(tmp_path, model_type="esm")
