"""Classical baseline features: exact k-mer frequencies, Morgan bits, a clear error without RDKit."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from biotf.analysis.feature_baselines import (dna_features, kmer_frequencies, kmer_window_frequencies, morgan_fingerprints,
                                      protein_features)
from biotf.errors import BiotfError, ConfigError, InputError
from biotf.analysis.feature_baselines import baseline


def test_kmer_frequencies_by_hand():
    features = kmer_frequencies(["AACG", "acgn"], "ACGT", (1, 2))
    # "AACG": A 2/4, C 1/4, G 1/4; dimers AA, AC, CG one third each (index 4*first + second)
    expected = np.zeros(20, np.float32)
    expected[[0, 1, 2]] = [0.5, 0.25, 0.25]
    expected[4 + np.array([0, 1, 6])] = 1 / 3
    np.testing.assert_allclose(features[0], expected, atol=1e-7)
    # lowercase folds; N breaks k-mers instead of being counted: a c g (1/3 each), dimers ac, cg (1/2 each)
    assert features[1][:4].tolist() == pytest.approx([1 / 3, 1 / 3, 1 / 3, 0])
    assert features[1][4 + 1] == pytest.approx(0.5) and features[1][4 + 6] == pytest.approx(0.5)


def test_protein_and_dna_shapes():
    protein = protein_features(["MKVLA", "X"], ["a", "b"])
    assert protein.shape == (2, 420) and protein[0, :20].sum() == pytest.approx(1) and protein[1].sum() == 0
    assert dna_features(["ACGTACGT"], ["a"]).shape == (1, 4 + 16 + 64 + 256)


def test_morgan_fingerprints():
    pytest.importorskip("rdkit")
    bits = morgan_fingerprints(["CCO", "c1ccccc1", "CCO"], ["ethanol", "benzene", "again"])
    assert bits.shape == (3, 2048) and set(np.unique(bits)) <= {0, 1}
    np.testing.assert_array_equal(bits[0], bits[2])
    assert (bits[0] != bits[1]).any()
    with pytest.raises(InputError, match="record 'bad'"):
        morgan_fingerprints(["C(C"], ["bad"])


def test_missing_rdkit_is_one_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "rdkit", None)  # import rdkit now raises ImportError
    with pytest.raises(BiotfError, match=r"RDKit is not installed.*biotf\[chem\]"):
        morgan_fingerprints(["CCO"], ["ethanol"])


def test_unknown_baseline():
    with pytest.raises(ConfigError, match="allowed: protein, dna, smiles, none"):
        baseline("rna")


@pytest.mark.parametrize("window", [1, 4, 7, 50])
def test_kmer_window_frequencies_are_the_frequencies_of_each_window(window):
    """Every base's row equals `kmer_frequencies` of the window around it, cut at the ends (N breaks k-mers)."""
    sequence = "ACGTTGCANACCGGTAAAC" * 2
    features = kmer_window_frequencies(sequence, "ACGT", (1, 2, 3), window)
    half = window // 2
    expected = kmer_frequencies([sequence[max(0, i - half):i + half + 1] for i in range(len(sequence))],
                                "ACGT", (1, 2, 3))
    assert features.shape == (len(sequence), 4 + 16 + 64)
    np.testing.assert_allclose(features, expected, atol=1e-6)
