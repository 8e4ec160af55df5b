"""Every tokenizer against arbitrary text: encoded under its policy (and decoded back where reversible),
or refused with a BiotfError naming the character and its position; never a bare KeyError/IndexError/
TypeError/UnicodeError, never a silent drop.

Tokenizers come from every shipped `conf/tokenizer/*.yaml`, each also with `unknown=to_unk`. The fast
settings run 30 examples per property and tokenizer; `pytest -m fuzz` runs 3,000 per tokenizer.
"""

from __future__ import annotations

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from biotf.errors import BiotfError, TokenizationError
from biotf.conventions import CONF_DIR
from biotf.tokenizers import Tokenizer, build_tokenizer

CONF = CONF_DIR / "tokenizer"
PROPERTY = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FUZZ = settings(max_examples=3000, deadline=None, suppress_health_check=list(HealthCheck))

BPE_CORPUS = ["MKVLAAGIVG acgt CC(=O)O the quick brown fox", "héllo wörld ☃ 日本語 \t\n"] * 5


def _configs() -> list[tuple[str, dict]]:
    """(id, config) for every shipped tokenizer YAML, plus its `unknown=to_unk` variant where it has one."""
    configs = []
    for path in sorted(CONF.glob("*.yaml")):
        config = yaml.safe_load(path.read_text())
        if config["kind"] == "bpe":
            config = {**config, "vocab_size": 300, "min_frequency": 1}
        configs.append((path.stem, config))
        if "unknown" in config:
            configs.append((f"{path.stem}-to_unk", {**config, "unknown": "to_unk"}))
    return configs


CONFIGS = _configs()
_BUILT: dict[str, Tokenizer] = {}


def tokenizer_for(name: str) -> Tokenizer:
    """Built once per session (BPE trains on a tiny corpus)."""
    if name not in _BUILT:
        config = dict(CONFIGS)[name]
        _BUILT[name] = build_tokenizer(config, texts=BPE_CORPUS if config["kind"] == "bpe" else None)
    return _BUILT[name]


# Text that hits every policy: residues, bases, SMILES pieces, lowercase, specials, whitespace,
# control characters, non-ASCII, lone surrogates (as `surrogateescape` produces) and everything else.
DOMAIN = "ACDEFGHIKLMNPQRSTVWYXUOBZacgtnuRYNbrcl[]()=#%@+-0123456789.<>*$/\\"
characters = st.one_of(
    st.sampled_from(DOMAIN),
    st.sampled_from([" ", "\t", "\n", "\r", "\x00", "\x07", "\x1b", "\x7f", "\u00a0", "\u2028", "\ufeff", "\udcff", "\ud800"]),
    st.sampled_from(["<mask>", "<cls>", "<unk>", "<pad>", "<eos>", "<null_1>", "<"]),
    st.characters(exclude_categories=()),  # any code point, surrogates included
)
texts = st.lists(characters, max_size=40).map("".join)
long_texts = st.tuples(st.sampled_from(["A", "ACGT", "C", "MK"]), st.integers(2_000, 20_000), texts).map(
    lambda t: t[0] * t[1] + t[2])


def check_encoding(tokenizer: Tokenizer, text: str) -> list[int] | None:
    """The ids of `text`, or None after checking the refusal names a real character at its position."""
    try:
        ids = tokenizer.encode(text, record="r1")
    except TokenizationError as error:
        assert 0 <= error.position < len(text) and text[error.position] == error.char, str(error)
        assert f"position {error.position}" in str(error) and "'r1'" in str(error)
        return None
    assert all(isinstance(i, int) and 0 <= i < tokenizer.vocab_size for i in ids)
    return ids


@pytest.mark.parametrize("name", [name for name, _ in CONFIGS])
@PROPERTY
@given(text=st.one_of(texts, long_texts))
def test_encodes_or_names_the_character(name, text):
    tokenizer = tokenizer_for(name)
    try:
        check_encoding(tokenizer, text)
    except BiotfError:
        pytest.fail(f"{name}: a BiotfError other than TokenizationError names no position for {text!r}")


@pytest.mark.parametrize("name", [name for name, _ in CONFIGS])
@PROPERTY
@given(batch=st.lists(texts, min_size=1, max_size=6))
def test_batch_agrees_with_one_by_one(name, batch):
    """The vectorised batch path gives each text's own ids, or refuses a bad text naming its record."""
    tokenizer = tokenizer_for(name)
    records = [f"rec{i}" for i in range(len(batch))]
    singles, refusals = [], []
    for record, text in zip(records, batch):
        try:
            singles.append(tokenizer.encode(text, record=record))
        except TokenizationError as error:
            refusals.append(str(error))
    if refusals:  # the batch names one of its bad records exactly as encoding it alone does
        with pytest.raises(TokenizationError) as batch_error:
            tokenizer.encode_batch(batch, records=records)
        assert str(batch_error.value) in refusals
    else:
        assert [ids.tolist() for ids in tokenizer.encode_batch(batch, records=records)] == singles


@pytest.mark.parametrize("name", [name for name, _ in CONFIGS if "to_unk" in name and "smiles" not in name])
@PROPERTY
@given(text=texts.filter(lambda t: "<" not in t))
def test_to_unk_drops_nothing(name, text):
    """Under `unknown=to_unk` no character vanishes: one token per character (k=1 / residues), or the
    k-mers and singles cover every base; `<unk>` stands for each refused one."""
    tokenizer = tokenizer_for(name)
    ids = check_encoding(tokenizer, text)
    if ids is None:
        return  # refused by another policy (uracil, lowercase, rare residues): named and positioned above
    content = tokenizer.encode(text, add_special_tokens=False)
    covered = sum(len(tokenizer.decode([i], skip_special_tokens=False)) if i != tokenizer.unk_id else 1
                  for i in content)
    if getattr(tokenizer, "stride", 1) == getattr(tokenizer, "k", 1):  # non-overlapping: an exact partition
        assert covered == len(text)
    else:
        assert covered >= len(text)


REVERSIBLE = {
    "protein": st.text(alphabet="LAGVSERTIDPKQNFYMHWCXBUZO.-", max_size=200),
    "dna": st.text(alphabet="ACGTN", max_size=200),
    "dna_char": st.text(alphabet="ACGTN", max_size=200),
    "smiles": st.lists(st.sampled_from(["C", "c", "N", "O", "(", ")", "=", "#", "1", "2", "%12", "Br", "Cl",
                                        "[nH]", "[C@@H]", "[Na+]", ".", "/", "\\"]), max_size=60).map("".join),
    "bpe": st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=200),
}


@pytest.mark.parametrize("name", sorted(REVERSIBLE))
@PROPERTY
@given(data=st.data())
def test_reversible_schemes_round_trip(name, data):
    """decode(encode(x)) == x wherever the scheme is reversible (no policy changed a character)."""
    tokenizer = tokenizer_for(name)
    text = data.draw(REVERSIBLE[name])
    if name == "smiles":
        tokenizer = build_tokenizer({"kind": "smiles", "vocab": None}, texts=[text] if text else None)
    assert tokenizer.decode(tokenizer.encode(text)) == text


@pytest.mark.fuzz
@pytest.mark.parametrize("name", [name for name, _ in CONFIGS])
@FUZZ
@given(text=st.one_of(texts, long_texts))
def test_fuzz_encodes_or_names_the_character(name, text):
    """The first property with 3,000 examples per tokenizer (opt-in: `pytest -m fuzz`)."""
    check_encoding(tokenizer_for(name), text)
