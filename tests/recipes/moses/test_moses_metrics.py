"""The MOSES metric functions (`biotf_recipes.moses`) against values computed by hand or directly with RDKit on
sets of a few molecules, and ChemNet / FCD against the `fcd` package on 50 MOSES molecules."""

from __future__ import annotations

import gzip
import math
from collections import Counter
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("rdkit")
from rdkit import Chem, DataStructs  # noqa: E402
from rdkit.Chem import AllChem  # noqa: E402

from biotf_recipes.moses import chemnet, metrics  # noqa: E402
from biotf_recipes.moses.filters import passes_filters  # noqa: E402

MOSES_TEST = Path(__file__).resolve().parents[4] / "shared" / "data" / "smiles" / "moses_test.csv.gz"
SET = ["CCO", "CCN", "c1ccccc1O", "CC(=O)Oc1ccccc1C(=O)O"]


def mols(smiles: list[str]) -> list:
    return [Chem.MolFromSmiles(s) for s in smiles]


def rdkit_tanimoto(a: str, b: str) -> float:
    """Tanimoto of MOSES's own fingerprint call (RDKit's GetMorganFingerprintAsBitVect, radius 2, 1024 bits)."""
    fa, fb = (AllChem.GetMorganFingerprintAsBitVect(Chem.MolFromSmiles(s), 2, nBits=1024) for s in (a, b))
    return DataStructs.TanimotoSimilarity(fa, fb)


def test_fingerprints_are_moses_morgan_bits_packed():
    packed = metrics.fingerprints(mols(SET))
    assert packed.shape == (4, 128) and packed.dtype == np.uint8
    for row, smiles in zip(packed, SET):
        bits = AllChem.GetMorganFingerprintAsBitVect(Chem.MolFromSmiles(smiles), 2, nBits=1024)
        assert np.flatnonzero(np.unpackbits(row)).tolist() == list(bits.GetOnBits())


def test_snn_is_the_mean_best_tanimoto_to_the_reference():
    generated, reference = ["CCO", "c1ccccc1O"], ["CCN", "CC(=O)Oc1ccccc1C(=O)O", "CCO"]
    expected = np.mean([max(rdkit_tanimoto(g, r) for r in reference) for g in generated])
    got = metrics.nearest_neighbour_similarity(metrics.fingerprints(mols(reference)),
                                               metrics.fingerprints(mols(generated)))
    assert got == pytest.approx(expected, abs=1e-6)
    assert got == pytest.approx((1 + rdkit_tanimoto("c1ccccc1O", "CC(=O)Oc1ccccc1C(=O)O")) / 2, abs=1e-6)


def test_internal_diversity_by_hand_on_two_molecules_and_rdkit_on_four():
    t = rdkit_tanimoto("CCO", "CCN")
    pair = metrics.fingerprints(mols(["CCO", "CCN"]))
    # all pairs, each with itself (T = 1): IntDiv1 = 1 - (1 + t) / 2; IntDiv2 = 1 - sqrt((1 + t^2) / 2)
    assert metrics.internal_diversity(pair, 1) == pytest.approx((1 - t) / 2, abs=1e-6)
    assert metrics.internal_diversity(pair, 2) == pytest.approx(1 - math.sqrt((1 + t * t) / 2), abs=1e-6)
    matrix = np.array([[rdkit_tanimoto(a, b) for b in SET] for a in SET])
    packed = metrics.fingerprints(mols(SET))
    assert metrics.internal_diversity(packed, 1) == pytest.approx(1 - matrix.mean(), abs=1e-6)
    assert metrics.internal_diversity(packed, 2) == pytest.approx(1 - np.sqrt((matrix ** 2).mean(1)).mean(), abs=1e-6)
    assert metrics.internal_diversity(metrics.fingerprints(mols(["CCO", "OCC"])), 1) == pytest.approx(0.0, abs=1e-7)


def test_brics_fragments_and_scaffolds_by_hand():
    # ethyl benzoate: the BRICS bonds are ester C-O, O-CH2 and the carbonyl-ring bond: four pieces
    assert sorted(metrics.fragments(Chem.MolFromSmiles("CCOC(=O)c1ccccc1"))) == [
        "[1*]C([6*])=O", "[16*]c1ccccc1", "[3*]O[3*]", "[4*]CC"]
    assert metrics.fragments(Chem.MolFromSmiles("c1ccc2ccccc2c1")) == ["c1ccc2ccccc2c1"]  # no BRICS bond
    assert metrics.scaffold(Chem.MolFromSmiles("CCc1ccccc1Cc1ccncc1")) == "c1ccc(Cc2ccncc2)cc1"
    assert metrics.scaffold(Chem.MolFromSmiles("CCOC(=O)c1ccccc1")) is None  # one ring: MOSES needs 2
    assert metrics.scaffold(Chem.MolFromSmiles("CCOC(=O)c1ccccc1"), min_rings=1) == "c1ccccc1"
    counts = metrics.scaffold_counts(mols(["CCc1ccccc1Cc1ccncc1", "c1ccccc1Cc1ccncc1", "CCO", "c1ccc2ccccc2c1"]))
    assert counts == Counter({"c1ccc(Cc2ccncc2)cc1": 2, "c1ccc2ccccc2c1": 1})


def test_cosine_similarity_of_counts_by_hand():
    # {A:1, B:1} . {A:2, C:1} = 2; norms sqrt(2) and sqrt(5)
    assert metrics.cosine_similarity({"A": 2, "C": 1}, {"A": 1, "B": 1}) == pytest.approx(2 / math.sqrt(10))
    assert metrics.cosine_similarity({"A": 3}, {"A": 1}) == pytest.approx(1.0)
    assert metrics.cosine_similarity({"A": 1}, {"B": 1}) == 0.0
    assert math.isnan(metrics.cosine_similarity({}, {"A": 1}))


def test_unique_at_k_and_novelty_by_hand():
    assert metrics.unique_at(["A", "A", "B", "C"], 2) == 0.5
    assert metrics.unique_at(["A", "A", "B", "C"], 10) == 0.75  # fewer than k: over all (the caller says so)
    train = np.unique(metrics.smiles_hashes(["CCO", "CCN", "c1ccccc1"]))
    assert metrics.novelty(["CCO", "CCO", "CCC", "CCCl"], train) == pytest.approx(2 / 3)  # distinct: 3, 2 new


@pytest.mark.parametrize("smiles, passes", [
    ("c1ccccc1", True), ("CCOC(=O)c1ccccc1", True),
    ("CC(=O)[O-]", False),            # a charge
    ("C1CCCCCCC1", False),            # a ring of 8
    ("CCP", False),                   # P is not among C, N, S, O, F, Cl, Br, H
    ("CCCCl", False),                 # MCF4, an alkyl halide
    ("O=Cc1ccccc1", False),           # MCF7, an aldehyde
    ("S=C1SC(=Cc2ccccc2)C(=O)N1", False),  # PAINS ene_rhod
])
def test_filters_by_rule(smiles, passes):
    assert passes_filters(Chem.MolFromSmiles(smiles)) is passes


def test_the_rhodanine_is_refused_by_pains_itself():
    from rdkit.Chem import FilterCatalog

    params = FilterCatalog.FilterCatalogParams()
    params.AddCatalog(FilterCatalog.FilterCatalogParams.FilterCatalogs.PAINS)
    assert FilterCatalog.FilterCatalog(params).HasMatch(Chem.MolFromSmiles("S=C1SC(=Cc2ccccc2)C(=O)N1"))


def test_frechet_distance_by_hand():
    # 1-D: (m1 - m2)^2 + s1 + s2 - 2 sqrt(s1 s2) = 1 + 1 + 4 - 4; 2-D diagonal: the same per axis
    assert chemnet.frechet_distance(np.zeros(1), np.eye(1), np.ones(1), 4 * np.eye(1)) == pytest.approx(2.0)
    assert chemnet.frechet_distance(np.zeros(2), np.diag([1.0, 9.0]), np.array([3.0, 0.0]),
                                    np.diag([4.0, 1.0])) == pytest.approx(9 + 1 + 4 - 4 + 9 + 1 - 6)


@pytest.mark.filterwarnings("ignore::DeprecationWarning:fcd")
@pytest.mark.filterwarnings("ignore::scipy.linalg.LinAlgWarning")
def test_frechet_distance_of_rank_deficient_covariances_equals_fcds():
    """Fewer samples than dimensions (few molecules, 512 activations): singular covariances, fcd's eps handling."""
    fcd = pytest.importorskip("fcd")
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(5, 12)), rng.normal(1.0, 2.0, size=(7, 12))
    stats = (a.mean(0), np.cov(a.T), b.mean(0), np.cov(b.T))
    assert chemnet.frechet_distance(*stats) == pytest.approx(fcd.calculate_frechet_distance(*stats), rel=1e-6)


def moses_smiles(n: int, skip: int = 0) -> list[str]:
    if not MOSES_TEST.exists():
        pytest.skip(f"{MOSES_TEST} is not here")
    with gzip.open(MOSES_TEST, "rt") as handle:
        return [line.strip() for line in islice(handle, 1 + skip, 1 + skip + n)]


@pytest.mark.slow  # fcd's DataLoader starts a worker process per call
@pytest.mark.filterwarnings("ignore::DeprecationWarning:fcd")
def test_chemnet_and_fcd_equal_the_fcd_package():
    """Activations within 1e-5 of fcd's get_predictions (the same weights, our network); FCD of 50 vs 50 MOSES
    molecules within 1e-6 relative of fcd's calculate_frechet_distance, and of get_fcd end to end."""
    fcd = pytest.importorskip("fcd")
    first, second = moses_smiles(50), moses_smiles(50, skip=1000)
    reference = fcd.get_predictions(fcd.load_ref_model(), first, device="cpu")
    ours = chemnet.activations(first, batch_size=16)
    assert np.abs(ours - reference).max() < 1e-5
    other = chemnet.activations(second)
    stats = [(a.mean(0), np.cov(a.T)) for a in (ours, other)]
    expected = fcd.calculate_frechet_distance(stats[0][0], stats[0][1], stats[1][0], stats[1][1])
    got = chemnet.frechet_distance(*stats[0], *stats[1])
    assert got == pytest.approx(expected, rel=1e-6) and got > 1
    assert got == pytest.approx(fcd.get_fcd(first, second, device="cpu"), rel=1e-4)


def test_chemnet_encoding_is_fcds():
    assert [chemnet.VOCABULARY[i] for i in chemnet.symbol_indices("ClC[Si]Br%")] == [
        "Cl", "C", "[", "Si", "]", "Br", "X", "."]
    encoded = chemnet.one_hot(["CC"])
    assert encoded.shape == (1, 350, 35) and encoded.sum() == pytest.approx(3 / 35) and not encoded[0, 3:].any()


def test_chemnet_weights_are_read_as_plain_tensors_only(tmp_path, monkeypatch):
    """A weights file that pickles a whole module (what torch.load without weights_only would run) is refused."""
    import torch

    from biotf.errors import CheckpointError

    pickled = tmp_path / "ChemNet.pt"
    torch.save(torch.nn.Linear(2, 2), pickled)
    monkeypatch.setattr(chemnet, "weights_path", lambda: pickled)
    chemnet.chemnet.cache_clear()
    try:
        with pytest.raises(CheckpointError, match="as plain tensors and values"):
            chemnet.chemnet()
    finally:
        chemnet.chemnet.cache_clear()
