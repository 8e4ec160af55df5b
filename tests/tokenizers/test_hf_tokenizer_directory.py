"""read_hf_tokenizer: the tokenizers of GPT-2, BERT, RoBERTa, BLOOM, Llama and Mistral checkpoints (and ProtBert,
DNABERT, ChemBERTa, ProtGPT2) give the ids of `transformers.AutoTokenizer` on the same directory, exactly, on real
text, proteins, SMILES and DNA; decode as transformers does; survive save/load; refuse custom code in one line."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hf_tokenizer_dirs import overlapping_kmers, with_fixed_padding_and_truncation, write_tokenizer

from biotf.errors import InputError
from biotf.tokenizers import BPETokenizer, PolicyStats, load_tokenizer
from biotf.tokenizers.build import with_options
from biotf.tokenizers.hf_tokenizer_directory import read_hf_tokenizer


@pytest.fixture(scope="module")
def english(shared_data) -> list[str]:
    return (shared_data / "text/tinyshakespeare_input.txt").read_text(encoding="utf-8").split("\n\n")[:300]


@pytest.fixture(scope="module")
def text(shared_data, english) -> list[str]:
    """English (trained on), Korean reviews (not: byte fallback, [UNK]), code with tabs and trailing spaces."""
    reviews = (shared_data / "text/nsmc_raw_subset_10k.tsv").read_text(encoding="utf-8").splitlines()[1:101]
    code = ["def f(x):\n    return x ** 2  # 제곱\n", "for (int i = 0; i < n; ++i) { s += a[i]; }\t\r\n",
            "    \n\n  trailing   spaces   ", "don't won't it's O'Neil . , ! ?", "é\u0301 ﬁ 🧬 <mask> [MASK] </s>"]
    return english[200:300] + reviews + code


@pytest.fixture(scope="module")
def proteins(deeploc_test) -> list[str]:
    return list(deeploc_test.values())[:200]


@pytest.fixture(scope="module")
def dna(splice) -> list[str]:
    return [sequence for _, sequence in splice[:300]]


# kind -> (what the tokenizer is trained on, what it is checked on), both from ../shared/data.
CASES = {
    "bert": ("english", "text"),
    "bert-cased": ("english", "text"),
    "protbert": (None, "spaced_proteins"),  # ProtBert: residues separated by spaces
    "dnabert": (None, "kmers"),  # DNABERT: overlapping 6-mers separated by spaces, as its users write them
    "gpt2": ("english", "text"),
    "protgpt2": ("proteins", "proteins"),
    "roberta": ("english", "text"),
    "chemberta": ("moses_train", "moses_test"),
    "bloom": ("english", "text"),
    "llama": ("english", "text"),
    "mistral": ("english", "text"),
}
WRITER = {"protgpt2": "gpt2", "chemberta": "roberta"}


@pytest.fixture(scope="module")
def corpora(english, text, proteins, moses, dna) -> dict[str, list[str]]:
    return {"english": english[:200], "text": text, "proteins": proteins[:150], "spaced_proteins":
            [" ".join(p) for p in proteins], "moses_train": moses[:1000], "moses_test": moses[1000:1300],
            "kmers": [overlapping_kmers(s, 6) for s in dna]}


@pytest.fixture(scope="module")
def directories(tmp_path_factory, corpora) -> dict[str, object]:
    """kind -> the directory as the hub ships it; `<kind>+json` -> transformers' tokenizer.json of the same."""
    from transformers import AutoTokenizer

    built = {}
    for kind, (train, _) in CASES.items():
        directory = write_tokenizer(WRITER.get(kind, kind), tmp_path_factory.mktemp(kind), corpora.get(train, []))
        built[kind] = directory
        if not (directory / "tokenizer.json").is_file():
            converted = tmp_path_factory.mktemp(kind + "-json")
            AutoTokenizer.from_pretrained(directory).save_pretrained(converted)
            built[kind + "+json"] = converted
    return built


def assert_same_as_transformers(ours: BPETokenizer, reference, texts: list[str]) -> None:
    for special in (True, False):
        expected = reference(texts, add_special_tokens=special)["input_ids"]
        assert [ids.tolist() for ids in ours.encode_batch(texts, add_special_tokens=special)] == expected
        assert [ours.encode(t, add_special_tokens=special) for t in texts[:20]] == expected[:20]
    for ids in reference(texts[:100])["input_ids"]:
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == reference.decode(ids, skip_special_tokens=skip)


@pytest.mark.parametrize("kind", [k for k in CASES] + [k + "+json" for k in CASES if not k.startswith(
    ("bloom", "llama", "mistral"))])
def test_ids_and_decode_equal_auto_tokenizer(kind, directories, corpora):
    from transformers import AutoTokenizer

    directory = directories[kind]
    ours = read_hf_tokenizer(directory)
    reference = AutoTokenizer.from_pretrained(directory)
    assert ours.get_vocab() == reference.get_vocab() and ours.vocab_size == len(reference)
    assert_same_as_transformers(ours, reference, corpora[CASES[kind.removesuffix("+json")][1]])


def test_wordpiece_lowercases_and_cleans_up_as_bert(directories):
    uncased, cased = read_hf_tokenizer(directories["bert"]), read_hf_tokenizer(directories["bert-cased"])
    assert uncased.encode("KING Richard") == uncased.encode("king richard")
    assert cased.encode("KING Richard") != cased.encode("king richard")
    assert uncased.clean_up_tokenization_spaces  # tokenizer_config.json asks; a BPE model never does (transformers)
    assert uncased.decode(uncased.encode("nay, sir!")) == "nay, sir!"


@pytest.mark.parametrize("kind, roles", [
    ("bert", {"pad": 0, "unk": 1, "cls": 2, "eos": 3, "mask": 4, "bos": None}),  # [SEP] ends a BERT sequence
    ("roberta", {"cls": 0, "bos": 0, "pad": 1, "eos": 2, "unk": 3, "mask": 4}),
    ("gpt2", {"bos": 0, "eos": 0, "unk": None, "pad": None, "cls": None, "mask": None}),  # unk is <|endoftext|>
    ("bloom", {"unk": 0, "bos": 1, "eos": 2, "pad": 3, "cls": None, "mask": None}),
    ("llama", {"unk": 0, "bos": 1, "eos": 2, "pad": None, "cls": None, "mask": None}),
])
def test_special_token_roles(kind, roles, directories):
    tokenizer = read_hf_tokenizer(directories[kind])
    assert {role: getattr(tokenizer, f"{role}_id") for role in roles} == roles
    assert {i for i in roles.values() if i is not None} - {roles.get("unk")} <= tokenizer.special_ids


def test_unknown_words_are_counted_never_silent(directories, dna, proteins):
    """DNABERT reads space-separated 6-mers: a k-mer holding N is [UNK], and so is a whole unspaced sequence (one
    WordPiece word) where the text is read as given (`spacing=none`): transformers' ids, and biotf counts every
    one."""
    from transformers import AutoTokenizer

    dnabert = read_hf_tokenizer(directories["dnabert"])
    kmers = [overlapping_kmers(s, 6) for s in dna]
    stats = PolicyStats()
    ids = dnabert.encode_batch(kmers, stats=stats)
    expected = sum(int(np.count_nonzero(i == dnabert.unk_id)) for i in ids)
    assert stats["unknown_to_unk"] == expected > 0  # uci_splice holds N, D, R, S
    protbert, stats = with_options(read_hf_tokenizer(directories["protbert"]), {"spacing": "none"}), PolicyStats()
    assert protbert.encode(proteins[0], stats=stats) == AutoTokenizer.from_pretrained(directories["protbert"])(
        proteins[0])["input_ids"] == [protbert.cls_id, protbert.unk_id, protbert.eos_id]
    assert stats == {"unknown_to_unk": 1}
    gpt2, stats = read_hf_tokenizer(directories["gpt2"]), PolicyStats()
    gpt2.encode_batch(["제곱 🧬"], stats=stats)
    assert not stats  # byte-level BPE has no unknown input


@pytest.mark.parametrize("kind", ["bert", "dnabert", "chemberta", "llama", "bloom"])
def test_save_load_round_trip_and_transformers_reads_the_save(kind, directories, corpora, tmp_path):
    from transformers import AutoTokenizer

    ours = read_hf_tokenizer(directories[kind])
    ours.save(tmp_path)
    again = load_tokenizer(tmp_path)
    assert isinstance(again, BPETokenizer) and again.fingerprint == ours.fingerprint
    assert again.special_tokens == ours.special_tokens
    assert again.clean_up_tokenization_spaces == ours.clean_up_tokenization_spaces
    texts = corpora[CASES[kind][1]][:60]
    assert_same_as_transformers(again, AutoTokenizer.from_pretrained(directories[kind]), texts)
    assert_same_as_transformers(again, AutoTokenizer.from_pretrained(tmp_path), texts)
    rebuilt = BPETokenizer.from_config(json.loads(json.dumps(ours.to_config())))
    assert rebuilt.fingerprint == ours.fingerprint and rebuilt.decode(rebuilt.encode(texts[0])) == ours.decode(
        ours.encode(texts[0]))


def test_load_tokenizer_reads_a_directory_without_tokenizer_json(directories):
    """`--tokenizer DIR` / `bpe: path:` take a hub directory holding only vocab.txt or vocab.json + merges.txt."""
    for kind in ("protbert", "chemberta"):
        assert load_tokenizer(directories[kind]).fingerprint == read_hf_tokenizer(directories[kind]).fingerprint


@pytest.mark.parametrize("kind, scheme", [("bert", "WordPiece"), ("roberta", "byte-level BPE"),
                                          ("llama", "SentencePiece-BPE")])
def test_padding_and_truncation_in_tokenizer_json_are_not_applied_as_transformers(kind, scheme, directories, corpora,
                                                                                    tmp_path):
    """A sentence-transformers export's tokenizer.json pads and cuts to a fixed length; `AutoTokenizer` turns both
    off before it encodes, and so does biotf: the real ids, texts longer than that length uncut."""
    from transformers import AutoTokenizer

    padded = tmp_path / "padded"
    padded.mkdir()
    for item in directories[kind].iterdir():
        (padded / item.name).write_bytes(item.read_bytes())
    with_fixed_padding_and_truncation(padded, length=16)
    reference = AutoTokenizer.from_pretrained(padded)
    texts = corpora[CASES[kind][1]][:40]
    assert max(len(ids) for ids in reference(texts)["input_ids"]) > 16
    for ours in (load_tokenizer(padded), read_hf_tokenizer(padded)):
        assert ours.scheme == scheme
        assert_same_as_transformers(ours, reference, texts)
        assert ours.backend.padding is None and ours.backend.truncation is None


def test_a_pipeline_without_padding_or_truncation_keeps_its_fingerprint(directories, tmp_path):
    """The sections are dropped from a copy only where present: a directory without them gives the pipeline as it
    was (checkpoints keep their fingerprints), and one with them the fingerprint of the same pipeline without."""
    from tokenizers import Tokenizer

    plain = directories["bloom"]  # a tokenizer.json as the hub ships it, without padding or truncation
    backend = Tokenizer.from_file(str(plain / "tokenizer.json"))
    assert BPETokenizer(backend).backend is backend
    padded = tmp_path / "padded"
    padded.mkdir()
    for item in plain.iterdir():
        (padded / item.name).write_bytes(item.read_bytes())
    with_fixed_padding_and_truncation(padded)
    assert load_tokenizer(padded).fingerprint == load_tokenizer(plain).fingerprint


SCHEMES = {"bert": "WordPiece", "bert-cased": "WordPiece", "protbert": "WordPiece", "dnabert": "WordPiece",
           "gpt2": "byte-level BPE", "protgpt2": "byte-level BPE", "roberta": "byte-level BPE",
           "chemberta": "byte-level BPE", "bloom": "byte-level BPE", "llama": "SentencePiece-BPE",
           "mistral": "SentencePiece-BPE"}


@pytest.mark.parametrize("kind", CASES)
def test_messages_name_the_tokenizer_by_its_scheme_not_bpe(kind, directories):
    """`scheme` reads the pipeline's model type, pre-tokenizer and decoder; "the bpe tokenizer" (the kind that wraps
    every Hugging Face pipeline) named WordPiece too."""
    from biotf.errors import ConfigError
    from biotf.export.embed import Embedder, EmbedOptions
    from biotf.model import Transformer, TransformerConfig

    tokenizer = read_hf_tokenizer(directories[kind])
    assert tokenizer.kind == "bpe" and tokenizer.scheme == SCHEMES[kind]
    if tokenizer.cls_id is None:
        model = Transformer(TransformerConfig(vocab_size=tokenizer.vocab_size, d_model=8, n_layers=1, n_heads=2,
                                              n_kv_heads=2, d_ff=16, max_seq_len=16))
        with pytest.raises(ConfigError, match=f"the {SCHEMES[kind]} tokenizer has no <cls> token"):
            Embedder(model, tokenizer, EmbedOptions(pool="cls"))


def test_unigram_and_word_level_pipelines_are_named_so():
    from tokenizers import Tokenizer, models

    unigram = Tokenizer(models.Unigram([("<unk>", 0.0), ("a", -1.0)], unk_id=0))
    assert BPETokenizer(unigram).scheme == "Unigram"
    assert BPETokenizer(Tokenizer(models.WordLevel({"<unk>": 0, "a": 1}, unk_token="<unk>"))).scheme == "word-level"
    assert BPETokenizer(Tokenizer(models.BPE())).scheme == "BPE"


def test_checkpoint_model_types_read_their_tokenizer_here():
    from biotf.checkpoint.hf_directory import TOKENIZER_READERS

    for model_type in ("gpt2", "bert", "roberta", "bloom", "llama", "mistral"):
        assert TOKENIZER_READERS[model_type] is read_hf_tokenizer


def _one_line(error) -> str:
    message = str(error.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("file, entry", [
    ("tokenizer_config.json", {"auto_map": {"AutoTokenizer": ["tok.MyTokenizer", None]}}),
    ("config.json", {"model_type": "bert", "auto_map": {"AutoTokenizer": ["tok.MyTokenizer", None]}}),
])
def test_custom_code_is_refused_in_one_line(file, entry, directories, tmp_path):
    for item in directories["protbert"].iterdir():
        (tmp_path / item.name).write_bytes(item.read_bytes())
    config = json.loads((tmp_path / file).read_text())
    (tmp_path / file).write_text(json.dumps({**config, **entry}))
    (tmp_path / "tok.py").write_text("raise SystemExit('custom code ran')\n")
    with pytest.raises(InputError) as error:
        read_hf_tokenizer(tmp_path)
    assert "custom tokenizer code" in _one_line(error) and file in str(error.value)


def test_unknown_tokenizer_class_and_missing_files_are_refused_in_one_line(directories, tmp_path):
    for item in directories["protbert"].iterdir():
        (tmp_path / item.name).write_bytes(item.read_bytes())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "NoSuchTokenizer"}))
    with pytest.raises(InputError) as error:
        read_hf_tokenizer(tmp_path)
    assert "transformers cannot read its tokenizer" in _one_line(error)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError) as error:
        read_hf_tokenizer(empty)
    assert "has no tokenizer files" in _one_line(error)


def test_lone_sentencepiece_model_needs_its_packages(tmp_path, monkeypatch):
    """A tokenizer.model without tokenizer.json is converted by transformers only with sentencepiece and protobuf:
    without them, one line naming what to install."""
    import biotf.tokenizers.hf_tokenizer_directory as module

    (tmp_path / "tokenizer.model").write_bytes(b"\x0a\x03abc")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    monkeypatch.setattr(module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(InputError) as error:
        read_hf_tokenizer(tmp_path)
    assert "pip install sentencepiece protobuf" in _one_line(error)
