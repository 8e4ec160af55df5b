"""The shared interface: registry, build_tokenizer from config, save / load, fingerprints, plugins."""

from __future__ import annotations

import json
from itertools import product

import numpy as np
import pytest

from biotf.errors import BiotfError, ConfigError, InputError
from biotf.conventions import CONF_DIR
from biotf.tokenizers import (AminoAcidTokenizer, BPETokenizer, KmerTokenizer, SmilesTokenizer, Tokenizer,
                              build_tokenizer, load_tokenizer, register_tokenizer, registered_tokenizers,
                              tokenizer_class)
from biotf.tokenizers.smiles import REGEX_TOKENS

CONF = CONF_DIR / "tokenizer"

BUILT = [AminoAcidTokenizer(), AminoAcidTokenizer(rare_residues="to_x", unknown="to_unk"), KmerTokenizer(),
         KmerTokenizer(k=6, stride=1, uracil="to_t"), KmerTokenizer(k=1), SmilesTokenizer(),
         SmilesTokenizer.train(["CC[Si]C", "c1ccccc1%10"], whitespace="strip")]


def test_registry_names():
    assert {"protein", "dna", "smiles", "bpe"} <= set(registered_tokenizers())
    assert tokenizer_class("protein") is AminoAcidTokenizer and tokenizer_class("dna") is KmerTokenizer
    assert tokenizer_class("smiles") is SmilesTokenizer and tokenizer_class("bpe") is BPETokenizer
    with pytest.raises(ConfigError, match=r"tokenizer='rna'.*allowed: .*dna.*protein"):
        tokenizer_class("rna")


@pytest.mark.parametrize("tokenizer", BUILT, ids=repr)
def test_save_load_round_trip(tokenizer, tmp_path):
    path = tokenizer.save(tmp_path)
    assert path == tmp_path / "tokenizer.json"
    assert json.loads(path.read_text())["biotf_tokenizer"] == tokenizer.kind
    for source in (tmp_path, path, str(tmp_path)):
        again = load_tokenizer(source)
        assert type(again) is type(tokenizer) and again.fingerprint == tokenizer.fingerprint
        assert again.to_config() == tokenizer.to_config() and again.get_vocab() == tokenizer.get_vocab()


@pytest.mark.parametrize("tokenizer", BUILT, ids=repr)
def test_interface_contract(tokenizer):
    vocab = tokenizer.get_vocab()
    assert sorted(vocab.values()) == list(range(tokenizer.vocab_size))
    assert tokenizer.pad_id is not None and tokenizer.mask_id is not None and tokenizer.unk_id is not None
    assert tokenizer.unk_id not in tokenizer.special_ids and tokenizer.mask_id in tokenizer.special_ids
    text = {"protein": "MKTAYIAK", "dna": "ACGTACGTTTGA", "smiles": "CC(=O)C"}[tokenizer.kind]
    if "[Si]" in vocab:
        text = "CC[Si]C"
    ids = tokenizer.encode(text)
    assert ids == tokenizer.encode_batch([text])[0].tolist()
    assert ids[0] == tokenizer.cls_id and ids[-1] == tokenizer.eos_id
    assert tokenizer.decode(ids) == text
    assert tokenizer.encode(text, add_special_tokens=False) == ids[1:-1]
    assert [vocab[t] for t in tokenizer.tokenize(text)] == ids[1:-1]
    assert tokenizer.from_config(tokenizer.to_config()).fingerprint == tokenizer.fingerprint


def test_fingerprints_are_pinned():
    """Stable across processes and versions: later issues store them in checkpoints. A change here
    means every saved checkpoint's tokenizer stops matching; change it only on purpose."""
    assert AminoAcidTokenizer().fingerprint == "58f28dcb0b4330b0"
    assert KmerTokenizer().fingerprint == "7ec846cc27d41b44"
    # The untrained SMILES tokenizer of before the base vocabulary, as saved: its stored vocabulary keeps its print.
    assert SmilesTokenizer(vocab=REGEX_TOKENS).fingerprint == "958d2610c98d3c62"
    assert SmilesTokenizer().fingerprint == "a94fde856a125dfd"  # smiles_vocabulary.txt: regenerate it on purpose only


def test_fingerprint_follows_everything_that_decides_ids():
    prints = {AminoAcidTokenizer(**dict(zip(["lowercase", "rare_residues", "unknown"], options))).fingerprint
              for options in product(["fold", "error"], ["keep", "to_x", "error"], ["error", "to_unk"])}
    assert len(prints) == 12
    prints = {KmerTokenizer(k=k, stride=s).fingerprint for k in range(1, 7) for s in range(1, k + 1)}
    assert len(prints) == 21
    assert SmilesTokenizer.train(["CCO"], base_vocabulary=False).fingerprint != \
        SmilesTokenizer.train(["CCN"], base_vocabulary=False).fingerprint
    assert SmilesTokenizer.train(["CC[Xe+3]"]).fingerprint != SmilesTokenizer.train(["CC[Kr+3]"]).fingerprint
    assert KmerTokenizer(k=6).fingerprint == KmerTokenizer(k=6, stride=6).fingerprint


@pytest.mark.parametrize("yaml_file", sorted(CONF.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_conf_yaml_builds_and_mirrors_the_constructor(yaml_file):
    from omegaconf import OmegaConf

    config = OmegaConf.load(yaml_file)  # what Hydra hands to training: a DictConfig
    tokenizer = build_tokenizer(config, texts=["CCO", "c1ccccc1", "ACGTNACGT"] * 20 if config.kind == "bpe" else
                                ["CCO", "c1ccccc1"])
    assert tokenizer.kind == config.kind
    options = {k: v for k, v in OmegaConf.to_container(config).items() if k != "kind"}
    if config.kind in ("protein", "dna"):
        assert tokenizer.to_config() == options  # keys mirror the constructor one to one


def test_build_tokenizer_errors():
    with pytest.raises(ConfigError, match=r"tokenizer.kind=None.*allowed"):
        build_tokenizer({"k": 3})
    with pytest.raises(ConfigError, match=r"tokenizer.kind='prot'.*allowed: .*protein"):
        build_tokenizer({"kind": "prot"})
    with pytest.raises(ConfigError, match=r"tokenizer.kmer=3.*allowed: k, stride, lowercase"):
        build_tokenizer({"kind": "dna", "kmer": 3})
    with pytest.raises(ConfigError, match=r"tokenizer.stride=7.*allowed: an integer from 1 to k=6"):
        build_tokenizer({"kind": "dna", "k": 6, "stride": 7})
    with pytest.raises(ConfigError, match=r"tokenizer.vocab_sz.*allowed: path, vocab_size"):
        build_tokenizer({"kind": "bpe", "vocab_sz": 5})
    with pytest.raises(ConfigError, match=r"tokenizer.path=None.*needs a path to load, or training data"):
        build_tokenizer({"kind": "bpe", "path": None, "vocab_size": 300})


def test_build_learned_kinds_from_training_data(tmp_path):
    smiles = build_tokenizer({"kind": "smiles", "vocab": None, "min_frequency": 2, "base_vocabulary": False},
                             texts=["CCO", "CCN", "C[Si]"])
    assert set(smiles.get_vocab()) == {"<pad>", "<unk>", "<cls>", "<eos>", "<mask>", "C"}
    fixed = build_tokenizer({"kind": "smiles", "vocab": ["C", "O"]}, texts=["CCN"])
    assert fixed.vocab_size == 7
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("ACGTACGTTTGACCA\n" * 200)
    from_files = build_tokenizer({"kind": "bpe", "vocab_size": 300}, files=[corpus])
    from_texts = build_tokenizer({"kind": "bpe", "vocab_size": 300}, texts=["ACGTACGTTTGACCA"] * 200)
    assert from_files.encode("ACGTACGTTTGACCA") == from_texts.encode("ACGTACGTTTGACCA")
    from_files.save(tmp_path / "bpe")
    loaded = build_tokenizer({"kind": "bpe", "path": str(tmp_path / "bpe"), "vocab_size": 4096})
    assert loaded.fingerprint == from_files.fingerprint


def test_load_tokenizer_errors(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_tokenizer(tmp_path / "nowhere")
    with pytest.raises(InputError, match="has no tokenizer.json"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(InputError, match="cannot read"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"hello": 1}')
    with pytest.raises(InputError, match="neither a biotf tokenizer"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text('{"biotf_tokenizer": "selfies-x", "config": {}}')
    with pytest.raises(InputError, match="'selfies-x', which is not registered here"):
        load_tokenizer(tmp_path)
    KmerTokenizer().save(tmp_path)
    edited = json.loads((tmp_path / "tokenizer.json").read_text())
    edited["config"]["lowercase"] = "error"
    (tmp_path / "tokenizer.json").write_text(json.dumps(edited))
    with pytest.raises(InputError, match="fingerprint .* does not match"):
        load_tokenizer(tmp_path)
    edited["config"]["k"] = 5
    (tmp_path / "tokenizer.json").write_text(json.dumps(edited))
    with pytest.raises(InputError, match=r"invalid 'dna' tokenizer config: .*tokenizer.stride=6"):
        load_tokenizer(tmp_path)


def test_plugin_codon_tokenizer_is_selected_like_a_builtin(tmp_path):
    """A user's scheme in a few lines: 64 codons, registered by name, built, saved and loaded back."""

    @register_tokenizer("codon-test")
    class CodonTokenizer(Tokenizer):
        specials = ["<pad>", "<unk>", "<cls>", "<eos>", "<mask>"]
        pad_id, unk_id, cls_id, eos_id, mask_id = range(5)

        def __init__(self, frame: int = 0):
            self.frame = frame
            self.vocab = {t: i for i, t in enumerate(self.specials + ["".join(c) for c in product("TCAG", repeat=3)])}

        def tokenize(self, text, record=None):
            text = text[self.frame:]
            return [text[i:i + 3] for i in range(0, len(text) - len(text) % 3, 3)]

        def encode(self, text, add_special_tokens=True, record=None):
            ids = [self.vocab.get(codon, self.unk_id) for codon in self.tokenize(text)]
            return [self.cls_id, *ids, self.eos_id] if add_special_tokens else ids

        def decode(self, ids, skip_special_tokens=True):
            tokens = {i: t for t, i in self.vocab.items()}
            return "".join(tokens[i] for i in ids if i >= 5 or not skip_special_tokens)

        @property
        def vocab_size(self):
            return len(self.vocab)

        def get_vocab(self):
            return dict(self.vocab)

        def to_config(self):
            return {"frame": self.frame}

        @classmethod
        def from_config(cls, config):
            return cls(**config)

    assert tokenizer_class("codon-test") is CodonTokenizer and "codon-test" in registered_tokenizers()
    tokenizer = build_tokenizer({"kind": "codon-test", "frame": 1})
    assert tokenizer.vocab_size == 69 and tokenizer.tokenize("xATGGCC") == ["ATG", "GCC"]
    batch = tokenizer.encode_batch(["xATGGCC", "xTTT"])
    assert [b.tolist() for b in batch] == [[2, tokenizer.vocab["ATG"], tokenizer.vocab["GCC"], 3],
                                           [2, tokenizer.vocab["TTT"], 3]]
    assert batch[0].dtype == np.int32
    tokenizer.save(tmp_path)
    again = load_tokenizer(tmp_path)
    assert isinstance(again, CodonTokenizer) and again.frame == 1 and again.fingerprint == tokenizer.fingerprint
    with pytest.raises(ConfigError, match="tokenizer.reading_frame"):
        build_tokenizer({"kind": "codon-test", "reading_frame": 1})
    with pytest.raises(BiotfError, match="has no Hugging Face equivalent"):
        tokenizer.to_hf()
    with pytest.raises(BiotfError, match="already registered"):
        register_tokenizer("dna")(CodonTokenizer)


def test_unpacked_copy_decompresses_gz_files_and_copies_the_rest(tmp_path):
    import gzip

    from biotf.tokenizers.build import unpacked_copy

    source = tmp_path / "packed"
    source.mkdir()
    with gzip.open(source / "tokenizer.json.gz", "wt", encoding="utf-8") as handle:
        handle.write('{"version": "1.0"}')
    (source / "tokenizer_config.json").write_text("{}")
    target = unpacked_copy(source, tmp_path / "plain")
    assert sorted(p.name for p in target.iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    assert (target / "tokenizer.json").read_text() == '{"version": "1.0"}'


def test_with_options_changes_policies_but_never_the_vocabulary():
    from biotf.errors import ConfigError
    from biotf.tokenizers import KmerTokenizer
    from biotf.tokenizers.build import with_options

    tokenizer = KmerTokenizer(k=6)
    assert with_options(tokenizer, {}) is tokenizer
    changed = with_options(tokenizer, {"uracil": "to_t"})
    assert changed.encode("ACGUAC", add_special_tokens=False) == tokenizer.encode("ACGTAC", add_special_tokens=False)
    with pytest.raises(ConfigError, match="changes the vocabulary"):
        with_options(tokenizer, {"k": 3, "stride": 3})
    with pytest.raises(ConfigError, match="tokenizer.colour"):
        with_options(tokenizer, {"colour": "red"})


def test_with_options_changes_only_policies_even_when_the_vocabulary_stays():
    """stride keeps the dna vocabulary but cuts valid text otherwise (what the model's ids mean): not a policy."""
    from biotf.tokenizers.build import with_options

    with pytest.raises(ConfigError, match=r"tokenizer.stride=1: not a policy of the dna tokenizer.*allowed: "
                                          r"lowercase, uracil, iupac, unknown"):
        with_options(KmerTokenizer(k=6), {"stride": 1})
    with pytest.raises(ConfigError, match=r"tokenizer.min_frequency=2: not a policy.*allowed: unknown, whitespace"):
        with_options(SmilesTokenizer(), {"min_frequency": 2})
    qwen_like = BPETokenizer.train_from_texts(["ACGT ACGT"] * 20, vocab_size=270)
    with pytest.raises(ConfigError, match=r"not a policy of the byte-level BPE tokenizer.*"
                                          r"allowed: spacing, rare_residues"):
        with_options(qwen_like, {"vocab_size": 300})
    lenient = with_options(SmilesTokenizer(), {"unknown": "to_unk"})
    assert lenient.get_vocab() == SmilesTokenizer().get_vocab() and lenient.unknown == "to_unk"
    stripping = with_options(AminoAcidTokenizer(), {"stop": "strip_terminal"})
    assert stripping.encode("MK*") == AminoAcidTokenizer().encode("MK")
