"""ESM parity: biotf loads transformers' EsmForMaskedLM checkpoints and computes what they compute.

Compared over real tokens (attention_mask 1): HF zeroes padded positions' embeddings and gives them their own
position ids, so padded rows of the two models differ by design; no real token ever attends to them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from biotf.errors import CheckpointError
from biotf.model import Transformer

pytest.importorskip("transformers")

TOLERANCE = 1e-4  # max abs difference of float32 logits and hidden states
PAD, MASK = 1, 32  # ESM-2's <pad> and <mask> ids (as in `build_random_esm`, tests/conftest.py)


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """<cls> residues <eos> <pad>..., right-padded as EsmTokenizer pads, with <mask> tokens in two rows."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(4, 29, (3, 14), generator=generator)
    ids[:, 0] = 0
    for row, length in enumerate((14, 10, 6)):
        ids[row, length - 1] = 2
        ids[row, length:] = PAD
    ids[0, 3] = ids[0, 7] = ids[1, 2] = MASK
    return ids, (ids != PAD).long()


def max_diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    return (a - b)[mask.bool()].abs().max().item()


def assert_parity(model: Transformer, hf) -> None:
    ids, mask = batch()
    labels = torch.where(ids == MASK, torch.randint(4, 29, ids.shape), -100)
    with torch.no_grad():
        ours = model(ids, attention_mask=mask, labels=labels, output_hidden_states=True)
        plain = model(ids, attention_mask=mask).logits
        theirs = hf(ids, attention_mask=mask, labels=labels, output_hidden_states=True)
    assert max_diff(ours.logits, theirs.logits, mask) <= TOLERANCE
    assert max_diff(plain, theirs.logits, mask) <= TOLERANCE  # the fused head + loss path and the plain one agree
    assert abs(ours.loss.item() - theirs.loss.item()) <= TOLERANCE
    assert len(ours.hidden_states) == len(theirs.hidden_states) == model.config.n_layers + 1
    for mine, reference in zip(ours.hidden_states, theirs.hidden_states):
        assert max_diff(mine, reference, mask) <= TOLERANCE


@pytest.mark.parametrize("token_dropout, tied", [(True, True), (False, True), (True, False)])
def test_saved_esm2_directory_matches_hf(token_dropout, tied, tmp_path, random_esm):
    hf = random_esm(token_dropout, tied)
    hf.save_pretrained(tmp_path)
    model = Transformer.from_hf(tmp_path)
    config = model.config
    assert (config.pos, config.causal, config.token_dropout, config.tie_embeddings) == ("rope", False, token_dropout,
                                                                                         tied)
    assert config.lm_head_transform and config.lm_head_bias and config.norm_position == "pre"
    contact_head = 3 * 4 + 1  # EsmForMaskedLM's contact-prediction regression, which biotf does not load
    assert model.num_parameters() == hf.num_parameters() - contact_head
    assert_parity(model, hf)


def test_model_object_and_pickled_bin_directory_load_alike(tmp_path, random_esm):
    hf = random_esm(token_dropout=True, seed=3)
    hf.config.save_pretrained(tmp_path)
    torch.save(hf.state_dict(), tmp_path / "pytorch_model.bin")  # the older hub layout, read weights_only=True
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
    hf.esm.save_pretrained(tmp_path / "bare")  # EsmModel: no masked-LM head
    with pytest.raises(CheckpointError, match="no masked-LM head.*EsmForMaskedLM"):
        Transformer.from_hf(tmp_path / "bare")
