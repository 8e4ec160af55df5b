"""SmilesTokenizer: the reference regex's pieces, strict round trip, learned vocabulary, policies, real sets."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from biotf.errors import BiotfError, ConfigError, TokenizationError
from biotf.tokenizers import PolicyStats, SmilesTokenizer
from biotf.tokenizers.smiles import REGEX_TOKENS, SPECIAL_TOKENS, base_tokens

# Schwaller et al. 2019 as published (Molecular Transformer README), with rxnfp's `>>?`.
REFERENCE = re.compile(r"(\[[^\]]+]|Br?|Cl?|N|O|S|P|F|I|b|c|n|o|s|p|\(|\)|\.|=|#|-|\+|\\|\/|:|~|@|\?|>>?|\*|\$"
                       r"|\%[0-9]{2}|[0-9])")


@pytest.fixture(scope="module")
def trained(moses, lipo) -> SmilesTokenizer:
    return SmilesTokenizer.train(moses + lipo)


def test_pieces_equal_the_reference_regex_on_real_sets(trained, moses, lipo, shared_data):
    from biotf.io.readers import ReaderOptions, read_records

    hiv = [r.sequence for r in read_records(shared_data / "smiles/molnet_hiv.csv.gz", ReaderOptions(column="smiles"))]
    tokenizer = SmilesTokenizer(unknown="to_unk")
    # every MOSES SMILES is accepted (the `trained` fixture learned from all 176k); pieces checked on a sample
    for corpus in (moses[::5], lipo, hiv[::2]):
        pieces = tokenizer._pieces(corpus, None, None)
        assert pieces == [REFERENCE.findall(s) for s in corpus]
        assert all("".join(p) == s for p, s in zip(pieces, corpus))
    vocab = trained.get_vocab()
    ids = trained.encode_batch(moses[:5000], add_special_tokens=False)
    assert [i.tolist() for i in ids] == [[vocab[t] for t in REFERENCE.findall(s)] for s in moses[:5000]]


def test_real_lipo_cases(trained, lipo):
    joined = " ".join(lipo)
    for piece in ["%10", "%11", "%12", "%13", "[Si]", "[Se]"]:
        assert piece in joined and piece in trained.get_vocab()
    example = next(s for s in lipo if "%13" in s)
    assert "%13" in trained.tokenize(example)
    assert trained.decode(trained.encode(example)) == example


def test_tokenize_examples():
    tokenizer = SmilesTokenizer()
    assert tokenizer.tokenize("C[C@@H](Cl)c1ccc%10cc1Br>>CC.[Na+]") == [
        "C", "[C@@H]", "(", "Cl", ")", "c", "1", "c", "c", "c", "%10", "c", "c", "1", "Br", ">>", "C", "C", ".",
        "[Na+]"]
    assert tokenizer.tokenize("CC>>>O") == ["C", "C", ">>", ">", "O"]
    assert tokenizer.tokenize("B[B-]Br") == ["B", "[B-]", "Br"]


@pytest.mark.parametrize("smiles, position, char", [
    ("CC X", 2, " "), ("CCX", 2, "X"), ("C%1C", 1, "%"), ("C%", 1, "%"), ("C[CC", 1, "["), ("CC]", 2, "]"),
    ("C[]C", 1, "["), ("CCé", 2, "é"), ("Cr", 1, "r"), ("CC\n", 2, "\n"),
])
def test_unmatched_character_is_an_error(smiles, position, char):
    """The reference regex would silently drop these characters; biotf names them."""
    with pytest.raises(TokenizationError) as error:
        SmilesTokenizer().encode_batch(["CCO", smiles], records=["ok", "bad"])
    assert (error.value.record, error.value.position, error.value.char) == ("bad", position, char)


def test_brackets_do_not_cross_texts():
    with pytest.raises(TokenizationError) as error:
        SmilesTokenizer().encode_batch(["C[", "C]"])
    assert error.value.position in (1, 1)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.text("CNOBrlc()[]=#%0123456789>.+-@H ", max_size=14), min_size=1, max_size=4))
def test_strict_round_trip_property(texts):
    tokenizer = SmilesTokenizer(unknown="to_unk")
    accepted = all("".join(REFERENCE.findall(t)) == t for t in texts)
    if not accepted:
        with pytest.raises(TokenizationError):
            tokenizer.encode_batch(texts)
        return
    pieces = tokenizer._pieces(texts, None, None)
    assert pieces == [REFERENCE.findall(t) for t in texts]
    assert ["".join(tokenizer.tokenize(t)) for t in texts] == texts


def test_train_vocabulary_and_min_frequency():
    """base_vocabulary=False: the corpus's pieces alone, as training learned them before the base existed."""
    corpus = ["CCO", "CCN", "C[Si]C", "c1ccccc1Br"]
    tokenizer = SmilesTokenizer.train(corpus, base_vocabulary=False)
    assert tokenizer.get_vocab()["<pad>"] == 0 and tokenizer.get_vocab()["C"] == 5  # most frequent first
    assert {"[Si]", "Br", "O", "N"} <= set(tokenizer.get_vocab())
    assert tokenizer.vocab_size == 5 + len({p for s in corpus for p in REFERENCE.findall(s)})
    frequent = SmilesTokenizer.train(corpus, min_frequency=2, base_vocabulary=False)
    assert "[Si]" not in frequent.get_vocab() and "C" in frequent.get_vocab()
    with pytest.raises(ConfigError):
        SmilesTokenizer.train(corpus, min_frequency=0)
    with pytest.raises(ConfigError, match="tokenizer.base_vocabulary"):
        SmilesTokenizer.train(corpus, base_vocabulary="yes")


def test_unknown_policy_for_unseen_pieces():
    tokenizer = SmilesTokenizer.train(["CCO"], base_vocabulary=False)
    with pytest.raises(TokenizationError, match=r"'\[Si\]' is not in the vocabulary") as error:
        tokenizer.encode("CC[Si]C", record="m1")
    assert (error.value.position, error.value.char, error.value.record) == (2, "[", "m1")
    stats = PolicyStats()
    lenient = SmilesTokenizer.train(["CCO"], unknown="to_unk", base_vocabulary=False)
    assert lenient.encode_batch(["CC[Si]Cl"], stats=stats, add_special_tokens=False)[0].tolist() == [5, 5, 1, 1]
    assert stats == {"unknown_to_unk": 2}


def test_real_esol_trailing_spaces_policy(esol_raw):
    with_space = [s for s in esol_raw if s != s.strip()]
    assert len(with_space) == 212 and all(s.endswith(" ") for s in with_space)
    strict = SmilesTokenizer.train([s.strip() for s in esol_raw])
    with pytest.raises(TokenizationError, match="whitespace='error'") as error:
        strict.encode_batch(esol_raw)
    first = next(i for i, s in enumerate(esol_raw) if s.endswith(" "))
    assert error.value.position == len(esol_raw[first]) - 1 and error.value.char == " "
    stripping = SmilesTokenizer(vocab=strict.to_config()["vocab"], whitespace="strip")
    stats = PolicyStats()
    ids = stripping.encode_batch(esol_raw, stats=stats)
    assert stats == {"whitespace_stripped": 212}
    assert [stripping.decode(i) for i in ids] == [s.strip() for s in esol_raw]
    with pytest.raises(TokenizationError, match="inside a SMILES"):
        stripping.encode(" C C ")


def test_real_bbbp_tokenizes_including_rdkit_rejects(bbbp):
    """Tokenizing is syntax, not chemistry: BBBP's 11 RDKit-invalid SMILES still round-trip."""
    tokenizer = SmilesTokenizer.train(bbbp)
    for smiles, ids in zip(bbbp, tokenizer.encode_batch(bbbp)):
        assert tokenizer.decode(ids) == smiles
    assert "O=N([O-])C1=C(CN=C1NCCSCc2ncccc2)Cc3ccccc3" in bbbp


def test_vocab_validation():
    with pytest.raises(ConfigError, match="not a single piece"):
        SmilesTokenizer(vocab=["C", "CC"])
    # specials, one-character pieces, Br Cl >>, %10-%99: the base vocabulary starts with them
    assert SmilesTokenizer(vocab=REGEX_TOKENS).vocab_size == 5 + 40 + 3 + 90
    assert SmilesTokenizer().get_vocab() == {t: i for i, t in enumerate([*SPECIAL_TOKENS, *base_tokens()])}


def test_to_hf_gives_identical_ids(trained, moses, lipo, esol_raw):
    texts = moses[:3000] + lipo[:1000] + ["C[C@@H](Cl)Br"]
    assert [i.tolist() for i in trained.encode_batch(texts)] == trained.to_hf()(texts)["input_ids"]
    stripping = SmilesTokenizer.train([s.strip() for s in esol_raw], whitespace="strip", unknown="to_unk")
    texts = esol_raw + ["CC[Xe]C", "CC>>>O"]
    assert [i.tolist() for i in stripping.encode_batch(texts)] == stripping.to_hf()(texts)["input_ids"]


def test_chem_helpers_without_rdkit(monkeypatch):
    import builtins

    from biotf import chemistry

    real_import = builtins.__import__

    def no_rdkit(name, *args, **kwargs):
        if name.startswith("rdkit"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_rdkit)
    with pytest.raises(BiotfError, match=r"pip install 'biotf\[chem\]'"):
        chemistry.canonicalize("CCO")


def test_chem_helpers_with_rdkit(bbbp):
    pytest.importorskip("rdkit")
    from biotf.errors import InputError
    from biotf.chemistry import canonicalize, is_valid

    assert sum(not is_valid(s) for s in bbbp) == 11
    assert canonicalize("OCC") == canonicalize("C(O)C") == "CCO"
    with pytest.raises(InputError, match="record 'line 61'"):
        canonicalize("O=N([O-])C1=C(CN=C1NCCSCc2ncccc2)Cc3ccccc3", record="line 61")
    tokenizer = SmilesTokenizer.train(bbbp)
    assert tokenizer.decode(tokenizer.encode(canonicalize(bbbp[0]))) == canonicalize(bbbp[0])


def test_base_vocabulary_is_the_scripts_and_covers_moses_and_moleculenet(moses, lipo, bbbp, esol_raw, shared_data,
                                                                         repo_root):
    """Every new SMILES tokenizer starts from smiles_vocabulary.txt: the regex's pieces, every element, common
    forms (scripts/smiles_vocabulary.py), then the bracket atoms of MOSES and MoleculeNet, so their molecules
    tokenize with no `<unk>` under the strict default (unknown='error' raises on any piece outside it)."""
    import importlib.util
    from itertools import islice

    from biotf.io.readers import ReaderOptions, read_records

    spec = importlib.util.spec_from_file_location("smiles_vocabulary", repo_root / "scripts/smiles_vocabulary.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    fixed, base = script.fixed_tokens(), base_tokens()
    assert base[:len(fixed)] == tuple(fixed) and all(p.startswith("[") for p in base[len(fixed):])
    assert {"[Cl]", "[Na+]", "[Og]", "[se]", "[13CH3]", "[C@@H]", "%99"} <= set(base)

    tokenizer = SmilesTokenizer()
    train = read_records(shared_data / "smiles/moses_train.csv.gz", ReaderOptions(column="SMILES"))
    hiv = read_records(shared_data / "smiles/molnet_hiv.csv.gz", ReaderOptions(column="smiles"))
    for corpus in ([r.sequence for r in islice(train, 100_000)], moses, lipo, bbbp, [r.sequence for r in hiv],
                   [s.strip() for s in esol_raw]):
        for smiles, ids in zip(corpus, tokenizer.encode_batch(corpus)):
            assert tokenizer.unk_id not in ids and tokenizer.decode(ids) == smiles


def test_training_adds_the_corpus_pieces_after_the_base():
    corpus = ["CC[Xe+3]C[Xe+3]", "C[Xe+3]", "C%05CC%05", "C[Kr+3]"]
    trained = SmilesTokenizer.train(corpus)
    assert trained.to_config()["vocab"] == [*base_tokens(), "[Xe+3]", "%05", "[Kr+3]"]  # most frequent first
    assert SmilesTokenizer.train(corpus, min_frequency=3).to_config()["vocab"] == [*base_tokens(), "[Xe+3]"]
    assert SmilesTokenizer(**trained.to_config()).fingerprint == trained.fingerprint  # saved, it keeps its ids


def test_a_bracket_atom_outside_the_vocabulary_is_one_piece_under_every_policy():
    """`[15CH3]` is one regex piece: refused by unknown='error', one `<unk>` (counted) with 'to_unk', never cut into
    smaller pieces; tokenize still gives the piece itself, so the round trip of the pieces holds."""
    assert "[15CH3]" not in base_tokens() and "[Pt+6]" not in base_tokens()
    with pytest.raises(TokenizationError, match=r"'\[15CH3\]' is not in the vocabulary") as error:
        SmilesTokenizer().encode("CC[15CH3]", record="m1")
    assert (error.value.record, error.value.position) == ("m1", 2)
    lenient, stats = SmilesTokenizer(unknown="to_unk"), PolicyStats()
    ids = lenient.encode_batch(["CC[15CH3].[Pt+6]"], add_special_tokens=False, stats=stats)[0].tolist()
    vocab = lenient.get_vocab()
    assert ids == [vocab["C"], vocab["C"], lenient.unk_id, vocab["."], lenient.unk_id] and stats == {"unknown_to_unk": 2}
    assert lenient.tokenize("CC[15CH3].[Pt+6]") == ["C", "C", "[15CH3]", ".", "[Pt+6]"]
