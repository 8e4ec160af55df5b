"""ESM C parity: biotf reads transformers' `EsmcForMaskedLM` / `EsmcModel` directories and computes what they compute,
and writes directories transformers loads back equal.

Compared over real tokens (attention_mask 1) of a right-padded batch with <mask> tokens: HF numbers every position,
biotf counts real tokens, the same on right-padded rows.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from biotf.errors import CheckpointError, ConfigError
from biotf.model import Transformer, TransformerConfig
from esmc_models import build_random_esmc, save_esmc_directory
from protein_batches import MASK
from protein_batches import masked_protein_batch as batch

transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-5  # max abs difference of float32 logits, hidden states and loss


def max_diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    return (a - b)[mask.bool()].abs().max().item()


def assert_parity(model: Transformer, hf) -> None:
    """Logits, loss and every hidden state (embeddings, each layer, the last after the final norm) of a masked LM; an
    encoder's hidden states and last hidden state."""
    ids, mask = batch()
    with torch.no_grad():
        if model.config.lm_head:
            labels = torch.where(ids == MASK, torch.randint(4, 29, ids.shape), -100)
            ours = model(ids, attention_mask=mask, labels=labels, output_hidden_states=True)
            theirs = hf(ids, attention_mask=mask, labels=labels, output_hidden_states=True)
            assert max_diff(ours.logits, theirs.logits, mask) <= TOLERANCE
            assert abs(ours.loss.item() - theirs.loss.item()) <= TOLERANCE
        else:
            encoder = getattr(hf, "esmc", hf)
            ours = model.encode(ids, attention_mask=mask, output_hidden_states=True)
            theirs = encoder(ids, attention_mask=mask, output_hidden_states=True)
            assert max_diff(ours.last_hidden_state, theirs.last_hidden_state, mask) <= TOLERANCE
    assert len(ours.hidden_states) == len(theirs.hidden_states) == model.config.n_layers + 1
    for mine, reference in zip(ours.hidden_states, theirs.hidden_states, strict=True):
        assert max_diff(mine, reference, mask) <= TOLERANCE


@pytest.mark.parametrize("bias, n_layers", [(False, 3), (True, 2)], ids=["no-bias", "attention+mlp-bias"])
def test_saved_esmc_masked_lm_matches_hf(bias, n_layers, tmp_path):
    hf = build_random_esmc(bias=bias, n_layers=n_layers, seed=1)
    save_esmc_directory(hf, tmp_path)
    model = Transformer.from_hf(tmp_path)
    config = model.config
    assert (config.qk_norm, config.norm_bias, config.final_norm_bias, config.lm_head_transform_bias) == (True, True,
                                                                                                     False, True)
    assert config.residual_scale == 1 / math.sqrt(n_layers / 36) and (config.qkv_bias, config.bias) == (bias, bias)
    assert (config.pos, config.mlp, config.norm, config.causal, config.tie_embeddings) == ("rope", "swiglu",
                                                                                          "layernorm", False, False)
    assert model.num_parameters() == hf.num_parameters()
    assert_parity(model, hf)
    assert_parity(Transformer.from_hf(hf), hf)  # the model object reads alike


@pytest.mark.parametrize("architecture", ["EsmcModel", "EsmcForSequenceClassification", "EsmcForTokenClassification"])
def test_encoders_without_lm_head_load_their_trunk(architecture, tmp_path):
    hf = build_random_esmc(architecture, seed=2)
    save_esmc_directory(hf, tmp_path)
    model = Transformer.from_hf(tmp_path)
    assert not model.config.lm_head and model.lm_head is None and model.head_transform is None
    assert model.num_parameters() == getattr(hf, "esmc", hf).num_parameters()
    assert_parity(model, hf)
    with pytest.raises(ConfigError, match="no language-model head"):
        model(*batch())


@pytest.mark.parametrize("architecture", ["EsmcForMaskedLM", "EsmcModel"])
def test_to_hf_writes_what_transformers_loads_equal_and_biotf_reads_back(architecture, tmp_path):
    hf = build_random_esmc(architecture, seed=3)
    save_esmc_directory(hf, tmp_path / "hf")
    model = Transformer.from_hf(tmp_path / "hf")
    model.to_hf(tmp_path / "written")  # no model_type: the first family that holds it
    assert json.loads((tmp_path / "written" / "config.json").read_text())["architectures"] == [architecture]
    reloaded = getattr(transformers, architecture).from_pretrained(tmp_path / "written").eval()
    assert_parity(model, reloaded)
    written, source = load_file(tmp_path / "written" / "model.safetensors"), load_file(tmp_path / "hf" /
                                                                                      "model.safetensors")
    assert written.keys() == source.keys() and all(torch.equal(written[k], source[k]) for k in source)
    again = Transformer.from_hf(tmp_path / "written")
    assert again.config == model.config


def test_a_tied_biotf_head_is_written_as_the_decoder_transformers_uses(tmp_path):
    config = Transformer.from_hf(build_random_esmc(seed=4)).config.replace(tie_embeddings=True)
    torch.manual_seed(0)
    model = Transformer(config).eval()
    model.to_hf(tmp_path, model_type="esmc")
    reloaded = transformers.EsmcForMaskedLM.from_pretrained(tmp_path).eval()
    torch.testing.assert_close(reloaded.lm_head.decoder.weight, model.embed.weight, rtol=0, atol=0)
    ids, mask = batch()
    with torch.no_grad():
        assert max_diff(model(ids, attention_mask=mask).logits, reloaded(ids, attention_mask=mask).logits,
                        mask) <= TOLERANCE


def edit_config(directory: Path, **changes) -> None:
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, **changes}))


@pytest.mark.parametrize("change, message", [
    ({"hidden_act": "gelu"}, r"hidden_act='gelu' is not supported: ESM C's MLP is SwiGLU"),
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}}, r"rope_type='linear'"),
    ({"attention_bias": True}, r"mlp_bias=False is not supported: .*must equal attention_bias=True"),
    ({"head_dim": 16}, r"head_dim=16 is not supported: biotf needs hidden_size / num_attention_heads = 8"),
    ({"architectures": ["EsmcForProteinFolding"]}, r"architectures=\['EsmcForProteinFolding'\].*EsmcForMaskedLM"),
])
def test_what_biotf_cannot_compute_is_refused_naming_the_field(change, message, tmp_path):
    save_esmc_directory(build_random_esmc(seed=5), tmp_path)
    edit_config(tmp_path, **change)
    with pytest.raises(CheckpointError, match=message):
        Transformer.from_hf(tmp_path)


def test_a_masked_lm_without_its_head_tensors_is_refused_naming_the_fix(tmp_path):
    save_esmc_directory(build_random_esmc(seed=5), tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    save_file({k: v for k, v in weights.items() if not k.startswith("lm_head.")}, tmp_path / "model.safetensors",
              metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="no masked-LM head.*set architectures to EsmcModel"):
        Transformer.from_hf(tmp_path)


def test_to_hf_refuses_what_esmc_cannot_hold(tmp_path):
    esmc = Transformer.from_hf(build_random_esmc(seed=6)).config
    with pytest.raises(CheckpointError, match="cannot write an ESM C checkpoint: config qk_norm=False"):
        Transformer(esmc.replace(qk_norm=False)).to_hf(tmp_path, model_type="esmc")
    with pytest.raises(CheckpointError, match=r"residual_scale=1.0, ESM C with n_layers=3 needs residual_scale=3.46"):
        Transformer(esmc.replace(residual_scale=1.0)).to_hf(tmp_path, model_type="esmc")
    with pytest.raises(CheckpointError, match="config final_norm_bias=None, ESM C needs final_norm_bias=False"):
        Transformer(esmc.replace(final_norm_bias=None)).to_hf(tmp_path, model_type="esmc")
    with pytest.raises(CheckpointError, match="cannot write an ESM checkpoint: config mlp='swiglu'"):
        Transformer(esmc).to_hf(tmp_path, model_type="esm")  # and ESM-2 is not ESM C
    with pytest.raises(CheckpointError, match="cannot write an ESM C checkpoint: config norm='rmsnorm'"):
        Transformer(TransformerConfig.preset("tiny", causal=False, n_kv_heads=4)).to_hf(tmp_path, model_type="esmc")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("tokenizer_files", [True, False], ids=["tokenizer.json", "no-tokenizer-files"])
def test_the_tokenizer_gives_the_ids_auto_tokenizer_gives(tokenizer_files, tmp_path):
    """The directory's tokenizer.json; without one, the vocabulary transformers' EsmcTokenizer builds (AutoTokenizer
    loads a directory without tokenizer files so)."""
    from biotf.checkpoint.hf_directory import load_hf_model

    hf = build_random_esmc(seed=7)
    if tokenizer_files:
        save_esmc_directory(hf, tmp_path)
    else:
        hf.save_pretrained(tmp_path)
    _, tokenizer = load_hf_model(tmp_path)
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path)
    for text in ("MKTAYIAKQRQISFVKSHFSRQ", "ACDEFGHIKLMNPQRSTVWYXBUZO.-", "MKT|GAV<mask>L"):
        assert tokenizer.encode(text) == reference(text)["input_ids"]
    assert (tokenizer.mask_id, tokenizer.pad_id, tokenizer.cls_id, tokenizer.eos_id) == (32, 1, 0, 2)
