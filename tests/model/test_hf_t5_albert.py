"""T5 encoders (ProtT5, Ankh) and ALBERT: biotf reads the directories `transformers` writes and computes what
`transformers` computes, with the switches of its one transformer they need (`pos: t5`, `scale_attention`, `d_head`,
the gated MLPs, `d_embed`, `share_layers`).

T5: tiny random `T5EncoderModel` (relu: ProtT5; gated-gelu: Ankh) and `T5ForConditionalGeneration` (ProtT5's other
layout: its encoder is read) in a directory whose tokenizer is a lone `spiece.model` in ProtT5's layout (one `▁X` piece
per residue, typed with spaces), so the SentencePiece conversion is exercised too. Embedding follows ProtT5's published
recipe: the encoder's last hidden state, mean over the residues, the final `</s>` left out.

ALBERT: tiny random `AlbertForMaskedLM` / `AlbertModel` over the ids of biotf's protein tokenizer (its tokenizer side
is biotf's own): logits, hidden states and mean-pooled embeddings, compared over real tokens (attention_mask 1); the
pseudo-log-likelihood and fine-tuning are tested with the other encoders (`tests/export/test_hf_encoders.py`), and
through a directory's own WordPiece tokenizer here.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from biotf.errors import CheckpointError, ConfigError
from biotf.io.readers import Record
from biotf.model import Transformer, TransformerConfig
from protein_batches import one_mask_per_forward_pll

transformers = pytest.importorskip("transformers")
pytest.importorskip("sentencepiece")

TOLERANCE = 1e-5
RESIDUES = "ACDEFGHIKLMNPQRSTVWYXUZOB"
PROTEINS = ["MKTAYIAKQRQISFVKSHFSRQ", "GAVLIPF", "MKWVTFISLLFLFSSAYS", "MEEPQSDPSV"]


def spaced(sequence: str) -> str:
    return " ".join(sequence)


def write_prott5_spiece(directory: Path) -> int:
    """A SentencePiece model in ProtT5's layout (<pad> 0, </s> 1, <unk> 2, then one `▁X` piece per residue) and the
    tokenizer_config.json beside it, without tokenizer.json; returns the vocabulary size."""
    import sentencepiece
    from sentencepiece import sentencepiece_model_pb2 as model_pb2

    trained = io.BytesIO()  # a trainer run gives a valid model (normaliser, trainer spec); its pieces are replaced
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(["M K T A Y", "A C D E"] * 10),
                                             model_writer=trained, vocab_size=12, model_type="unigram", pad_id=0,
                                             eos_id=1, unk_id=2, bos_id=-1, minloglevel=2, hard_vocab_limit=False)
    proto = model_pb2.ModelProto()
    proto.ParseFromString(trained.getvalue())
    specials = list(proto.pieces)[:3]
    assert [piece.piece for piece in specials] == ["<pad>", "</s>", "<unk>"]
    del proto.pieces[:]
    proto.pieces.extend(specials)
    for rank, residue in enumerate(RESIDUES):
        proto.pieces.add(piece="▁" + residue, score=-float(rank + 1), type=model_pb2.ModelProto.SentencePiece.NORMAL)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "spiece.model").write_bytes(proto.SerializeToString())
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "T5Tokenizer", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
        "extra_ids": 0}))
    return len(proto.pieces)


T5_KINDS = {"encoder-relu": ("T5EncoderModel", "relu"), "encoder-gated-gelu": ("T5EncoderModel", "gated-gelu"),
            "seq2seq-relu": ("T5ForConditionalGeneration", "relu")}


@pytest.fixture(scope="module", params=list(T5_KINDS))
def t5(request, tmp_path_factory):
    """(HF encoder, directory): a random T5 of this kind saved by `save_pretrained` beside a lone spiece.model. Heads
    of 12 dimensions over d_model 32 (T5's d_kv need not divide it), 8 buckets up to distance 20 (the proteins are
    longer, so the logarithmic buckets and the last one are used)."""
    architecture, feed_forward = T5_KINDS[request.param]
    directory = tmp_path_factory.mktemp(request.param)
    vocab_size = write_prott5_spiece(directory)
    torch.manual_seed(7)
    config = transformers.T5Config(vocab_size=vocab_size, d_model=32, d_kv=12, d_ff=48, num_layers=3,
                                   num_decoder_layers=2, num_heads=4, feed_forward_proj=feed_forward,
                                   relative_attention_num_buckets=8, relative_attention_max_distance=20,
                                   dropout_rate=0.0, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)
    hf = getattr(transformers, architecture)(config).eval()
    with torch.no_grad():  # norm gains away from their init (ones), so that each is seen to be read
        for name, parameter in hf.named_parameters():
            if "layer_norm" in name:
                parameter.mul_(torch.rand_like(parameter) + 0.5)
    hf.save_pretrained(directory)
    assert not (directory / "tokenizer.json").exists()
    return hf.get_encoder() if architecture != "T5EncoderModel" else hf, directory


def test_t5_encoder_hidden_states_equal_transformers(t5):
    encoder, directory = t5
    model = Transformer.from_hf(directory)
    config = model.config
    assert (config.pos, config.scale_attention, config.d_head, config.norm, config.lm_head) == ("t5", False, 12,
                                                                                              "rmsnorm", False)
    assert model.num_parameters() == encoder.num_parameters()
    ids = torch.randint(3, config.vocab_size, (3, 41))
    ids[:, -1] = 1
    mask = torch.ones_like(ids)
    mask[1, 30:] = 0  # right padding, as tokenizers pad
    with torch.no_grad():
        theirs = encoder(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        ours = model.encode(ids, mask, output_hidden_states=True)
    keep = mask.bool()
    assert (ours.last_hidden_state - theirs.last_hidden_state)[keep].abs().max() <= TOLERANCE
    # each block's input, then the last block's output after the final norm, in both
    assert len(ours.hidden_states) == len(theirs.hidden_states) == config.n_layers + 1
    for mine, reference in zip(ours.hidden_states, theirs.hidden_states):
        assert (mine - reference)[keep].abs().max() <= TOLERANCE


def test_t5_embedding_is_the_published_mean_over_residues_without_the_final_eos(t5):
    """ProtT5's recipe: tokenizer(" ".join(sequence)) -> encoder -> last_hidden_state[:len(sequence)].mean(0); biotf's
    `Model.load` on the directory (SentencePiece-only tokenizer converted as transformers converts it) gives it, a
    protein longer than T5's training length (512) whole, as its authors embed it."""
    import biotf

    encoder, directory = t5
    model = biotf.Model.load(directory)
    proteins = [*PROTEINS, "MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ" * 20]  # 660 residues
    vectors = model.embed([spaced(p) for p in proteins])  # batched: shorter records are padded
    reference_tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    for vector, sequence in zip(vectors, proteins, strict=True):
        ids = reference_tokenizer(spaced(sequence), return_tensors="pt").input_ids
        assert ids.shape[1] == len(sequence) + 1 and ids[0, -1] == reference_tokenizer.eos_token_id
        assert model.tokenizer.encode(spaced(sequence)) == ids[0].tolist()
        with torch.no_grad():
            hidden = encoder(input_ids=ids).last_hidden_state[0]
        expected = hidden[:len(sequence)].mean(0).numpy()
        assert np.abs(vector - expected).max() <= TOLERANCE


def test_a_t5_encoder_has_no_masked_lm_so_scoring_is_refused_in_one_line(t5):
    import biotf

    _, directory = t5
    model = biotf.Model.load(directory)
    with pytest.raises(ConfigError, match="no language-model head"):
        model.score([spaced(PROTEINS[0])], method="pll")


def test_export_model_writes_a_t5_encoder_model_that_transformers_loads_equal(t5, tmp_path, capsys):
    """`biotf export-model DIR OUT --hf t5`: a T5EncoderModel directory (with the tokenizer's transformers files)
    whose hidden states equal the source's, and whose tokenizer gives the same ids."""
    from biotf.cli import main

    encoder, directory = t5
    out = tmp_path / "out"
    assert main(["export-model", str(directory), str(out), "--hf", "t5"]) == 0, capsys.readouterr().err
    written = transformers.T5EncoderModel.from_pretrained(out).eval()
    text = spaced(PROTEINS[0])
    ids = transformers.AutoTokenizer.from_pretrained(directory)(text, return_tensors="pt").input_ids
    assert transformers.AutoTokenizer.from_pretrained(out)(text).input_ids == ids[0].tolist()
    with torch.no_grad():
        assert (written(input_ids=ids).last_hidden_state - encoder(input_ids=ids).last_hidden_state).abs().max() <= 1e-6
    assert Transformer.from_hf(out).config == Transformer.from_hf(directory).config


def test_t5_export_refuses_what_t5_cannot_hold_naming_the_field(tmp_path):
    model = Transformer(TransformerConfig(pos="t5", causal=False, lm_head=False, scale_attention=True, mlp="relu"))
    with pytest.raises(CheckpointError, match="config scale_attention=True, T5 needs scale_attention=False"):
        model.to_hf(tmp_path, "t5")
    assert not (tmp_path / "config.json").exists()


@pytest.mark.parametrize("changes, key", [
    ({"feed_forward_proj": "gated-mish"}, "feed_forward_proj"),
    ({"is_decoder": True}, "is_decoder"),
    ({"architectures": ["T5ForQuestionAnswering"]}, "architectures"),
])
def test_what_biotf_cannot_compute_of_a_t5_is_refused_naming_the_field(changes, key, t5, tmp_path):
    _, directory = t5
    config = {**json.loads((directory / "config.json").read_text()), **changes}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=f"config {key}="):
        Transformer.from_hf(tmp_path)


# --- ALBERT ------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=["AlbertForMaskedLM", "AlbertModel"])
def albert(request, tmp_path_factory):
    """(HF model, biotf model read from its saved directory, tokenizer): embeddings of 16 under a hidden size of 32,
    one layer shared by 3, gelu_new (ALBERT's default); weights perturbed away from their init (zero biases, unit
    norms) so that every tensor counts."""
    from biotf.tokenizers import AminoAcidTokenizer

    tokenizer = AminoAcidTokenizer()
    torch.manual_seed(11)
    config = transformers.AlbertConfig(vocab_size=tokenizer.vocab_size, embedding_size=16, hidden_size=32,
                                       num_hidden_layers=3, num_attention_heads=4, intermediate_size=48,
                                       max_position_embeddings=64, hidden_dropout_prob=0.0,
                                       attention_probs_dropout_prob=0.0, pad_token_id=tokenizer.pad_id)
    hf = getattr(transformers, request.param)(config).eval()
    with torch.no_grad():
        for parameter in hf.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    directory = tmp_path_factory.mktemp(request.param)
    hf.save_pretrained(directory)
    return hf, Transformer.from_hf(directory), tokenizer


def test_albert_logits_and_hidden_states_equal_transformers(albert):
    hf, model, tokenizer = albert
    config = model.config
    assert (config.d_embed, config.share_layers, len(model.blocks), config.mlp) == (16, True, 1, "gelu_tanh")
    assert model.num_parameters() == sum(p.numel() for name, p in hf.named_parameters() if "pooler" not in name)
    ids = torch.tensor([tokenizer.encode(p)[:16] + [tokenizer.pad_id] * max(0, 16 - len(tokenizer.encode(p)))
                        for p in PROTEINS])
    mask = (ids != tokenizer.pad_id).long()
    ids[0, 5] = tokenizer.mask_id
    with torch.no_grad():
        theirs = hf(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        ours = model.encode(ids, mask, output_hidden_states=True)
    keep = mask.bool()
    assert len(ours.hidden_states) == len(theirs.hidden_states) == config.n_layers + 1
    for mine, reference in zip(ours.hidden_states, theirs.hidden_states):
        assert (mine - reference)[keep].abs().max() <= TOLERANCE
    if config.lm_head:
        with torch.no_grad():
            logits = model(ids, mask).logits
        assert (logits - theirs.logits)[keep].abs().max() <= TOLERANCE


def test_albert_embedding_is_the_last_hidden_state_mean_over_content_tokens(albert):
    from biotf.export.embed import EmbedOptions, Embedder

    hf, model, tokenizer = albert
    trunk = getattr(hf, "albert", hf)
    records = [Record(f"p{i}", sequence, {}, i) for i, sequence in enumerate(PROTEINS)]
    embedded = list(Embedder(model, tokenizer, EmbedOptions(pool="mean")).embed(records))
    for item, sequence in zip(embedded, PROTEINS, strict=True):
        ids = torch.tensor([tokenizer.encode(sequence)])  # <cls> residues <eos>
        with torch.no_grad():
            expected = trunk(input_ids=ids).last_hidden_state[0, 1:-1].mean(0).numpy()
        assert np.abs(item.vectors[-1] - expected).max() <= TOLERANCE


def test_an_albert_directory_with_a_wordpiece_vocab_loads_once_its_tokenizer_class_is_named(tmp_path):
    """rxnmapper's layout: an AlbertForMaskedLM beside a WordPiece vocab.txt and a tokenizer_config.json naming no
    class. transformers then builds an AlbertTokenizer of its special tokens alone (every input one [UNK]): refused
    in one line saying what to name; with `"tokenizer_class": "BertTokenizer"` the directory loads with
    AutoTokenizer's ids and scores (PLL) as the transformers loop does, spaces typed between residues."""
    import biotf
    from biotf.errors import InputError
    from hf_tokenizer_dirs import PROTBERT_VOCAB, write_wordpiece

    torch.manual_seed(5)
    config = transformers.AlbertConfig(vocab_size=len(PROTBERT_VOCAB), embedding_size=16, hidden_size=32,
                                       num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                                       max_position_embeddings=64, pad_token_id=0)
    hf = transformers.AlbertForMaskedLM(config).eval()
    hf.save_pretrained(tmp_path)
    write_wordpiece(tmp_path, PROTBERT_VOCAB, do_lower_case=False, model_type="albert")
    with pytest.raises(InputError, match='special tokens alone.*"tokenizer_class": "BertTokenizer"'):
        biotf.Model.load(tmp_path)
    settings = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**settings, "tokenizer_class": "BertTokenizer"}))
    model = biotf.Model.load(tmp_path)
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path)
    text = spaced(PROTEINS[1])
    ids = reference(text, return_tensors="pt").input_ids
    assert model.tokenizer.encode(text) == ids[0].tolist()
    score = model.score([text], method="pll").log_likelihood[0]
    assert abs(score - one_mask_per_forward_pll(hf, ids, reference.mask_token_id)) <= 1e-4


@pytest.mark.parametrize("changes, key", [({"num_hidden_groups": 2}, "num_hidden_groups"),
                                          ({"inner_group_num": 2}, "inner_group_num"),
                                          ({"hidden_act": "mish"}, "hidden_act")])
def test_what_biotf_cannot_compute_of_an_albert_is_refused_naming_the_field(changes, key, albert, tmp_path):
    hf, _, _ = albert
    config = {**hf.config.to_dict(), "architectures": [type(hf).__name__], **changes}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=f"config {key}="):
        Transformer.from_hf(tmp_path)


def test_albert_is_read_only(albert, tmp_path):
    _, model, _ = albert
    with pytest.raises(CheckpointError, match="cannot write model_type 'albert'"):
        model.to_hf(tmp_path, "albert")


# --- the switches, on biotf's own models ---------------------------------------------------------------------------
@pytest.mark.parametrize("fields, key", [
    (dict(relative_buckets=16), "relative_buckets"),  # a bucket count without pos=t5
    (dict(pos="t5", relative_buckets=3, causal=False), "relative_buckets"),
    (dict(pos="t5", relative_buckets=32, relative_max_distance=8, causal=False), "relative_max_distance"),
    (dict(d_embed=16, stem="conv", causal=False), "d_embed"),
    (dict(d_embed=16, causal=False), "lm_head_transform"),  # a d_embed-wide head matrix needs the head transform
    (dict(d_head=0), "d_head"),
])
def test_incompatible_switches_are_refused_naming_the_field(fields, key):
    with pytest.raises(ConfigError) as error:
        TransformerConfig(**fields)
    assert error.value.key == key


def test_the_switches_train_together_on_a_biotf_model():
    """A model of biotf's own with every switch T5 and ALBERT brought (shared layers, factorised embeddings, unscaled
    attention over heads wider than d_model / n_heads, T5 buckets, a gated GELU): ten optimiser steps lower the loss,
    gradients reach the one shared block and the bias table, and left padding gives the real tokens the same logits."""
    config = TransformerConfig(vocab_size=30, d_model=32, n_layers=3, n_heads=4, d_head=12, d_ff=40, pos="t5",
                               relative_buckets=8, relative_max_distance=16, scale_attention=False, mlp="geglu_tanh",
                               causal=False, d_embed=16, share_layers=True, lm_head_transform=True, norm="layernorm",
                               bias=True, max_seq_len=64)
    torch.manual_seed(0)
    model = Transformer(config)
    assert len(model.blocks) == 1 and len(model.layer_blocks) == 3
    ids = torch.randint(0, 30, (4, 20))
    labels = torch.where(torch.rand(ids.shape) < 0.3, ids, -100)
    optimiser = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(10):
        optimiser.zero_grad()
        loss = model(ids, labels=labels).loss
        loss.backward()
        assert model.positions.relative_bias.weight.grad.abs().sum() > 0
        assert model.blocks[0].attn.qkv.weight.grad.abs().sum() > 0
        optimiser.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.1
    model.eval()
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids[:1]], dim=1)
    mask = torch.cat([torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 20, dtype=torch.long)], dim=1)
    with torch.no_grad():
        assert (model(padded, mask).logits[0, 3:] - model(ids[:1]).logits[0]).abs().max() <= 1e-5
