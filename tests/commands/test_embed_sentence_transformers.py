"""`biotf embed` on the directories sentence-transformers exports: a BERT whose tokenizer.json pads and cuts to a fixed
length (every such export ships one) embeds as `transformers` computes it, from text and CSV, chunked or truncated;
a directory `SentenceTransformer.save` wrote embeds with its own pooling (mean / cls / max, with and without
Normalize, cut at its maximum length) equal to `SentenceTransformer(dir).encode`, and an explicit --pool is biotf's."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
import torch

import biotf
from biotf.cli import main
from biotf.io.embeddings import npz_text
from hf_tokenizer_dirs import with_fixed_padding_and_truncation, write_tokenizer

transformers = pytest.importorskip("transformers")
sentence_transformers = pytest.importorskip("sentence_transformers")

TOLERANCE = 1e-5  # max abs difference of float32 sentence vectors
MAX_SEQ_LENGTH = 12  # the sentence-transformers directories cut here: several sentences below are longer
SENTENCES = ["A man is eating food.", "Now is the winter of our discontent made glorious summer by this sun of York",
             "hello", "What light through yonder window breaks? It is the east, and Juliet is the sun.",
             "To be, or not to be: that is the question."]


@pytest.fixture(scope="module")
def bert_directory(tmp_path_factory, random_encoder, shared_data):
    """A tiny random BertModel with a WordPiece tokenizer whose tokenizer.json pads and truncates to 128."""
    english = (shared_data / "text/tinyshakespeare_input.txt").read_text(encoding="utf-8").split("\n\n")[:300]
    directory = write_tokenizer("bert", tmp_path_factory.mktemp("bert"), english)
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    random_encoder("bert", masked_lm=False, seed=41, max_positions=64, vocab_size=len(tokenizer),
                   pad_token_id=tokenizer.pad_token_id).save_pretrained(directory)
    return with_fixed_padding_and_truncation(directory, length=128)


def embed(capsys, *args: str) -> str:
    status = main(["embed", "--no-progress", *args])
    err = capsys.readouterr().err
    assert status == 0, err
    return err


def hf_content_means(directory, texts: list[str]) -> np.ndarray:
    """transformers' last hidden state on AutoTokenizer's ids, mean-pooled over content tokens (biotf's --pool mean)."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    model = transformers.AutoModel.from_pretrained(directory).eval()
    encoded = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**encoded).last_hidden_state
    content = (encoded["attention_mask"].bool() & ~torch.isin(encoded["input_ids"],
                                                                torch.tensor(tokenizer.all_special_ids)))[..., None]
    return ((hidden * content).sum(1) / content.sum(1)).numpy()


@pytest.mark.parametrize("source", ["txt", "csv"])
@pytest.mark.parametrize("long", [[], ["--long", "truncate"]], ids=["chunk", "truncate"])
def test_a_tokenizer_json_that_pads_and_truncates_embeds_as_transformers(source, long, bert_directory, tmp_path,
                                                                         capsys):
    from biotf.tokenizers import load_tokenizer

    reference = transformers.AutoTokenizer.from_pretrained(bert_directory)
    assert [load_tokenizer(bert_directory).encode(text) for text in SENTENCES] == reference(SENTENCES)["input_ids"]
    if source == "txt":
        path = tmp_path / "sentences.txt"
        path.write_text("\n".join(SENTENCES) + "\n")
        columns = []
    else:
        path = tmp_path / "sentences.csv"
        path.write_text("id,text\n" + "".join(f's{i},"{text}"\n' for i, text in enumerate(SENTENCES)))
        columns = ["--column", "text", "--id-column", "id"]
    output = tmp_path / "s.npz"
    err = embed(capsys, "--model", str(bert_directory), "--input", str(path), *columns, "--output", str(output), *long)
    assert "5 records" in err and "0 chunked, 0 truncated" in err
    exported = np.load(output)
    assert len(npz_text(exported, "ids")) == len(SENTENCES)
    assert np.abs(exported["embeddings"] - hf_content_means(bert_directory, SENTENCES)).max() <= TOLERANCE


def save_sentence_transformer(bert_directory, directory, mode: str, normalize: bool):
    """What `SentenceTransformer.save` writes for Transformer + Pooling(mode) [+ Normalize], cut at MAX_SEQ_LENGTH."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    transformer = Transformer(str(bert_directory), max_seq_length=MAX_SEQ_LENGTH)
    modules = [transformer, Pooling(transformer.get_embedding_dimension(), pooling_mode=mode)]
    SentenceTransformer(modules=modules + ([Normalize()] if normalize else []), device="cpu").save(str(directory))
    with_fixed_padding_and_truncation(directory, length=128)  # as the hub's exports ship their tokenizer.json
    return directory


@pytest.mark.parametrize("mode, normalize", [("mean", True), ("mean", False), ("cls", True), ("max", False)])
def test_a_sentence_transformers_directory_embeds_as_sentence_transformer_encode(mode, normalize, bert_directory,
                                                                                  tmp_path, capsys):
    from sentence_transformers import SentenceTransformer

    directory = save_sentence_transformer(bert_directory, tmp_path / "st", mode, normalize)
    assert (directory / "modules.json").is_file() and (directory / "1_Pooling" / "config.json").is_file()
    expected = SentenceTransformer(str(directory), device="cpu").encode(SENTENCES, convert_to_numpy=True)
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("\n".join(SENTENCES) + "\n")
    output = tmp_path / "st.npz"
    err = embed(capsys, "--model", str(directory), "--input", str(sentences), "--output", str(output))
    assert "0 chunked, 3 truncated" in err  # cut at max_seq_length, as sentence-transformers cuts them
    exported = np.load(output)
    assert np.abs(exported["embeddings"] - expected).max() <= TOLERANCE
    info = json.loads(str(exported["info"]))
    assert (info["pool"], info["normalize"], info["pool_specials"], info["max_length"]) == (mode, normalize, True,
                                                                                         MAX_SEQ_LENGTH)
    if normalize:
        assert np.allclose(np.linalg.norm(exported["embeddings"], axis=1), 1, atol=1e-6)
    # biotf.Model pools as the directory says too, the same vectors as the command
    np.testing.assert_array_equal(biotf.Model.load(directory).embed(SENTENCES), exported["embeddings"])

    # An explicit --pool is biotf's own pooling (content tokens, no normalization), on the whole records.
    err = embed(capsys, "--model", str(directory), "--input", str(sentences), "--output", str(output), "--pool",
                "mean", "--overwrite")
    assert "0 chunked, 0 truncated" in err
    assert np.abs(np.load(output)["embeddings"] - hf_content_means(bert_directory, SENTENCES)).max() <= TOLERANCE


def test_the_older_layout_and_what_biotf_cannot_compute(bert_directory, tmp_path, capsys):
    """sentence-transformers 2-4 wrote pooling flags and sentence_bert_config.json's max_seq_length (still read
    by sentence-transformers today), version 1 the checkpoint in `0_Transformer/`; a module or pooling biotf does not compute is refused in one line, and --pool
    still embeds the directory."""
    from sentence_transformers import SentenceTransformer

    directory = save_sentence_transformer(bert_directory, tmp_path / "old", "max", True)
    (directory / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": 32, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": False,
        "pooling_mode_max_tokens": True, "pooling_mode_mean_sqrt_len_tokens": False}))
    (directory / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 9, "do_lower_case": False}))
    expected = SentenceTransformer(str(directory), device="cpu").encode(SENTENCES, convert_to_numpy=True)
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("\n".join(SENTENCES) + "\n")
    output = tmp_path / "old.npz"
    embed(capsys, "--model", str(directory), "--input", str(sentences), "--output", str(output))
    assert np.abs(np.load(output)["embeddings"] - expected).max() <= TOLERANCE
    # sentence-transformers 1 kept the checkpoint in a subdirectory, which modules.json names
    nested = shutil.copytree(directory, tmp_path / "nested")
    (nested / "0_Transformer").mkdir()
    for item in list(nested.iterdir()):
        if item.is_file() and item.name not in ("modules.json", "config_sentence_transformers.json", "README.md"):
            item.rename(nested / "0_Transformer" / item.name)
    modules = json.loads((nested / "modules.json").read_text())
    modules[0]["path"] = "0_Transformer"
    (nested / "modules.json").write_text(json.dumps(modules))
    nested_expected = SentenceTransformer(str(nested), device="cpu").encode(SENTENCES, convert_to_numpy=True)
    assert np.abs(nested_expected - expected).max() <= TOLERANCE
    embed(capsys, "--model", str(nested), "--input", str(sentences), "--output", str(output), "--overwrite")
    assert np.abs(np.load(output)["embeddings"] - expected).max() <= TOLERANCE

    refused = {"1_Pooling/config.json": ({"pooling_mode": "weightedmean"}, r"pooling mode 'weightedmean'.*--pool"),
               "modules.json": (None, r"lists the modules Transformer, Pooling, Normalize, Dense.*--pool")}
    for name, (content, message) in refused.items():
        broken = tmp_path / name.split("/")[0].replace(".", "_")
        shutil.copytree(directory, broken)
        if content is None:
            modules = json.loads((broken / "modules.json").read_text())
            content = modules + [{"idx": 3, "name": "3", "path": "3_Dense",
                                  "type": "sentence_transformers.models.Dense"}]
        (broken / name).write_text(json.dumps(content))
        assert main(["embed", "--no-progress", "--model", str(broken), "--input", str(sentences), "--output",
                     str(broken / "x.npz")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert re.search(message, err), err
        embed(capsys, "--model", str(broken), "--input", str(sentences), "--output", str(broken / "x.npz"),
              "--pool", "cls")
