"""BERT and RoBERTa parity: biotf loads transformers' checkpoints (model objects and saved directories) and computes
what they compute, logits and every hidden state, on a right-padded batch with masks; `to_hf` writes directories
transformers' Auto classes load with the same outputs; what the transformer cannot express is refused naming the field.

Compared over real tokens (attention_mask 1): padded rows are unspecified in both, and no real token attends to them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from biotf.errors import CheckpointError
from biotf.model import Transformer, TransformerConfig
from protein_batches import MASK, PAD
from protein_batches import masked_protein_batch as batch

transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-5  # max abs difference of float32 logits and hidden states
VOCAB = 33  # biotf's protein tokenizer (ESM's vocabulary): <cls> 0, <pad> 1, <eos> 2, <mask> 32


def max_diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    return (a - b)[mask.bool()].abs().max().item()


def assert_parity(model: Transformer, hf, inputs: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
    """Every hidden state, and with an LM head the logits and the masked-LM loss, within TOLERANCE of `hf`'s."""
    ids, mask = inputs or batch()
    with torch.no_grad():
        ours = model.encode(ids, attention_mask=mask, output_hidden_states=True)
        theirs = hf(ids, attention_mask=mask, output_hidden_states=True)
        assert len(ours.hidden_states) == len(theirs.hidden_states) == model.config.n_layers + 1
        for mine, reference in zip(ours.hidden_states, theirs.hidden_states, strict=True):
            assert max_diff(mine, reference, mask) <= TOLERANCE
        if model.config.lm_head:
            labels = torch.where(ids == MASK, torch.randint(4, 29, ids.shape), -100)
            with_loss = model(ids, attention_mask=mask, labels=labels)
            reference = hf(ids, attention_mask=mask, labels=labels)
            assert max_diff(with_loss.logits, reference.logits, mask) <= TOLERANCE
            assert abs(with_loss.loss.item() - reference.loss.item()) <= TOLERANCE


VARIANTS = {  # (model_type, masked LM, tied, hidden_act)
    "bert-mlm": ("bert", True, True, "gelu"), "bert-mlm-untied-gelu_new": ("bert", True, False, "gelu_new"),
    "bert-model": ("bert", False, True, "gelu"), "roberta-mlm": ("roberta", True, True, "gelu"),
    "roberta-mlm-untied-relu": ("roberta", True, False, "relu"), "roberta-model": ("roberta", False, True, "gelu"),
}


@pytest.mark.parametrize("model_type, masked_lm, tied, hidden_act", VARIANTS.values(), ids=VARIANTS.keys())
def test_directory_and_model_object_match_hf_and_to_hf_round_trips(model_type, masked_lm, tied, hidden_act,
                                                                    tmp_path, random_encoder):
    hf = random_encoder(model_type, masked_lm, tied, hidden_act, seed=len(model_type) + tied)
    hf.save_pretrained(tmp_path / "hf")
    model = Transformer.from_hf(tmp_path / "hf")
    config = model.config
    assert (config.pos, config.norm_position, config.embed_norm, config.causal, config.lm_head) == (
        "learned", "post", True, False, masked_lm)
    assert config.type_vocab_size == hf.config.type_vocab_size
    # RoBERTa numbers real tokens from pad id + 1: the table keeps HF's rows, the first pad id + 1 serve padding only.
    assert config.position_offset == (PAD + 1 if model_type == "roberta" else 0)
    assert config.max_seq_len == 40 - config.position_offset
    # BERT's head applies hidden_act, RoBERTa's GELU whatever hidden_act is.
    mlp = {"gelu": "gelu", "gelu_new": "gelu_tanh", "relu": "relu"}[hidden_act]
    assert config.mlp == mlp and config.lm_head_activation == (mlp if model_type == "bert" else "gelu")
    unused = 0 if tied or not masked_lm else VOCAB  # an untied head adds decoder.bias; HF keeps `bias` unused
    pooler = 0 if masked_lm else 32 * 32 + 32
    assert model.num_parameters() == hf.num_parameters() - unused - pooler
    assert_parity(model, hf)
    assert_parity(Transformer.from_hf(hf), hf)

    model.to_hf(tmp_path / "written")
    written = json.loads((tmp_path / "written" / "config.json").read_text())
    assert written["model_type"] == model_type and written["architectures"] == [type(hf).__name__]
    auto = transformers.AutoModelForMaskedLM if masked_lm else transformers.AutoModel
    reloaded = auto.from_pretrained(tmp_path / "written", attn_implementation="sdpa").eval()
    assert type(reloaded) is type(hf)
    assert_parity(model, reloaded)
    again = Transformer.from_hf(tmp_path / "written")
    assert again.config == config
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), model.state_dict().values()))


def test_roberta_positions_count_real_tokens_so_left_padding_matches_too(random_encoder):
    hf = random_encoder("roberta", seed=3)
    assert_parity(Transformer.from_hf(hf), hf, batch(left=True))


def test_bert_left_padding_numbers_real_tokens_from_zero_unlike_hf(random_encoder):
    """HF BERT numbers positions 0, 1, ... whatever the padding; biotf counts real tokens, so a left-padded record
    gets the outputs it has alone (HF's differ) and right-padded batches, how tokenizers pad, match HF exactly."""
    hf = random_encoder("bert", seed=4)
    model = Transformer.from_hf(hf)
    ids, mask = batch(left=True)
    alone = ids[2, mask[2].bool()][None]
    with torch.no_grad():
        padded = model.encode(ids, attention_mask=mask).last_hidden_state[2, mask[2].bool()]
        single = model.encode(alone).last_hidden_state[0]
        theirs = hf.bert(ids, attention_mask=mask).last_hidden_state[2, mask[2].bool()]
    assert (padded - single).abs().max() <= TOLERANCE
    assert (padded - theirs).abs().max() > 0.01


def test_token_type_zero_is_what_hf_adds_without_token_type_ids(random_encoder):
    hf = random_encoder("bert", seed=5, type_vocab_size=3)
    model = Transformer.from_hf(hf)
    ids, mask = batch()
    with torch.no_grad():
        zeros = hf(ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids)).logits
        ones = hf(ids, attention_mask=mask, token_type_ids=torch.ones_like(ids)).logits
        ours = model(ids, attention_mask=mask).logits
    assert max_diff(ours, zeros, mask) <= TOLERANCE < max_diff(ours, ones, mask)


def legacy_norm_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): tensor
            for name, tensor in state.items()}


@pytest.mark.parametrize("storage", ["safetensors", "bin", "bin-gamma-beta"])
@pytest.mark.parametrize("architecture", ["BertForSequenceClassification", "BertForTokenClassification",
                                          "RobertaForSequenceClassification", "RobertaForTokenClassification"])
def test_classifier_checkpoints_load_their_encoder_as_transformers_does(architecture, storage, tmp_path,
                                                                         random_encoder):
    """A fine-tuned classifier as the hub holds it (model.safetensors, or only a pytorch_model.bin, with gamma / beta
    norm names where TF converted it): biotf reads its encoder, every hidden state equal to that of the classifier
    `transformers` loads from the same directory (which renames gamma / beta on load); the classifier is not read."""
    model_type = "roberta" if architecture.startswith("Roberta") else "bert"
    trunk = random_encoder(model_type, masked_lm=False, seed=9)
    torch.manual_seed(10)
    classifier = getattr(transformers, architecture)(trunk.config).eval()
    getattr(classifier, classifier.base_model_prefix).load_state_dict(trunk.state_dict(), strict=False)
    classifier.save_pretrained(tmp_path)
    if storage != "safetensors":
        state = load_file(tmp_path / "model.safetensors")
        (tmp_path / "model.safetensors").unlink()
        torch.save(legacy_norm_names(state) if storage == "bin-gamma-beta" else state, tmp_path / "pytorch_model.bin")
    reference = getattr(transformers, architecture).from_pretrained(tmp_path, attn_implementation="sdpa").eval()
    encoder = getattr(reference, reference.base_model_prefix)
    assert torch.equal(encoder.embeddings.LayerNorm.weight, trunk.embeddings.LayerNorm.weight)  # renamed on load
    model = Transformer.from_hf(tmp_path)
    assert not model.config.lm_head
    assert_parity(model, encoder)


def test_old_checkpoints_with_gamma_beta_norms_and_pickled_weights_load(tmp_path, random_encoder):
    """TF-converted BERTs (bert-base-uncased's pytorch_model.bin) name LayerNorm gains and biases gamma and beta."""
    hf = random_encoder("bert", seed=6)
    hf.config.save_pretrained(tmp_path)
    state = legacy_norm_names(hf.state_dict())
    assert sum("gamma" in name for name in state) == 1 + 2 * 3 + 1
    torch.save(state, tmp_path / "pytorch_model.bin")
    assert_parity(Transformer.from_hf(tmp_path), hf)


def edit_config(directory: Path, **changes) -> None:
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, **changes}))


@pytest.mark.parametrize("model_type, name", [("bert", "BERT"), ("roberta", "RoBERTa")])
def test_what_biotf_cannot_compute_is_refused_naming_the_field(model_type, name, tmp_path, random_encoder):
    hf = random_encoder(model_type, seed=7)
    refusals = {"position_embedding_type": ("relative_key", r"position_embedding_type='relative_key'.*absolute"),
                "hidden_act": ("silu", r"hidden_act='silu'.*gelu \| gelu_new"),
                "is_decoder": (True, "is_decoder=True is not supported"),
                "architectures": (["BertLMHeadModel"], r"architectures=\['BertLMHeadModel'\]")}
    if model_type == "roberta":
        refusals["pad_token_id"] = (None, "pad_token_id=None .*numbers positions from the pad id")
    for key, (value, message) in refusals.items():
        hf.save_pretrained(tmp_path / key)
        edit_config(tmp_path / key, **{key: value})
        with pytest.raises(CheckpointError, match=f"{name} config {message}"):
            Transformer.from_hf(tmp_path / key)
    hf.save_pretrained(tmp_path / "headless")  # says it is a masked LM, but its head's tensors are gone
    head = "cls." if model_type == "bert" else "lm_head."
    weights = load_file(tmp_path / "headless" / "model.safetensors")
    torch.save({k: v for k, v in weights.items() if not k.startswith(head)}, tmp_path / "headless" / "pytorch_model.bin")
    (tmp_path / "headless" / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=f"{name} checkpoint has no masked-LM head.*set architectures to"):
        Transformer.from_hf(tmp_path / "headless")


def test_to_hf_refuses_what_the_family_cannot_hold(tmp_path, random_encoder):
    bert = Transformer.from_hf(random_encoder("bert", seed=8))
    roberta = Transformer.from_hf(random_encoder("roberta", seed=8))
    with pytest.raises(CheckpointError, match="cannot write a BERT checkpoint: config position_offset=2, BERT needs "
                                              "position_offset=0"):
        roberta.to_hf(tmp_path, model_type="bert")
    with pytest.raises(CheckpointError, match="cannot write a RoBERTa checkpoint: config position_offset=0, RoBERTa "
                                              "numbers positions from pad id \\+ 1"):
        bert.to_hf(tmp_path, model_type="roberta")
    with pytest.raises(CheckpointError, match="cannot write a BERT checkpoint: config norm_position='pre'"):
        Transformer(TransformerConfig.preset("esm2-8m", pos="learned")).to_hf(tmp_path, model_type="bert")
    tanh_head = Transformer(bert.config.replace(lm_head_activation="gelu_tanh"))
    with pytest.raises(CheckpointError, match="config lm_head_activation='gelu_tanh', BERT needs "
                                              "lm_head_activation='gelu'"):
        tanh_head.to_hf(tmp_path, model_type="bert")
    # Without model_type, the first family that holds the config: a RoBERTa's offset makes it one.
    roberta.to_hf(tmp_path / "default")
    assert json.loads((tmp_path / "default" / "config.json").read_text())["model_type"] == "roberta"


def test_a_biotf_model_without_token_types_or_logit_bias_is_written_with_zeros(tmp_path):
    config = TransformerConfig(vocab_size=VOCAB, d_model=32, n_layers=2, n_heads=4, d_ff=64, max_seq_len=20,
                               pos="learned", norm="layernorm", norm_position="post", mlp="gelu", qkv_bias=True,
                               bias=True, causal=False, embed_norm=True, lm_head_transform=True)
    torch.manual_seed(9)
    model = Transformer(config)
    model.to_hf(tmp_path)
    hf = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert hf.config.type_vocab_size == 1 and not hf.bert.embeddings.token_type_embeddings.weight.any()
    assert_parity(model, hf)
