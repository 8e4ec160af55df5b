"""Classical features to hold embeddings against: does the model know more than simple counting?

- protein: amino-acid composition + dipeptide frequencies (420 features; the standard sequence-only
  baseline of protein property prediction, e.g. Dubchak et al. 1995, and the DeepLoc paper's comparisons);
- dna: k-mer frequencies for k = 1..4 (340 features);
- smiles: Morgan (ECFP4-like) fingerprints, radius 2, 2048 bits, from RDKit (the `[chem]` extra).

K-mer frequencies are counts divided by the number of k-mers in the sequence, so long and short records
compare; characters outside the alphabet (X, N, ...) break k-mers instead of being guessed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from biotf.chemistry import fingerprint_bits, molecule
from biotf.errors import ConfigError

AMINO_ACIDS = "ACDEFGHIKLMNPQRSTVWY"
NUCLEOTIDES = "ACGT"
MORGAN_RADIUS, MORGAN_BITS = 2, 2048


def _codes(sequence: str, alphabet: str) -> np.ndarray:
    """Each character's index in `alphabet` (case-insensitive), -1 outside it."""
    table = np.full(256, -1, np.int64)
    for code, letter in enumerate(alphabet):
        table[ord(letter)] = table[ord(letter.lower())] = code
    return table[np.frombuffer(sequence.encode("ascii", "replace"), np.uint8)]


def _kmer_index(codes: np.ndarray, size: int, k: int) -> np.ndarray:
    """The k-mer starting at each position as a number below size**k, -1 where it holds a character outside the
    alphabet (len(codes) - k + 1 values)."""
    if len(codes) < k:
        return np.zeros(0, np.int64)
    windows = sliding_window_view(codes, k)
    index = windows @ (size ** np.arange(k - 1, -1, -1))
    index[(windows < 0).any(axis=1)] = -1
    return index


def kmer_frequencies(sequences: Sequence[str], alphabet: str, ks: Sequence[int]) -> np.ndarray:
    """(N, sum of len(alphabet)**k) frequencies of every k-mer over `alphabet` (case-insensitive)."""
    size = len(alphabet)
    widths = [size ** k for k in ks]
    features = np.zeros((len(sequences), sum(widths)), np.float32)
    for row, sequence in enumerate(sequences):
        codes = _codes(sequence, alphabet)
        column = 0
        for k, width in zip(ks, widths):
            index = _kmer_index(codes, size, k)
            index = index[index >= 0]
            if len(index):
                features[row, column:column + width] = np.bincount(index, minlength=width) / len(index)
            column += width
    return features


def kmer_window_frequencies(sequence: str, alphabet: str, ks: Sequence[int], window: int) -> np.ndarray:
    """(len(sequence), sum of len(alphabet)**k): for each base, the frequencies of the k-mers lying wholly inside
    the `window` bases centred on it (window // 2 on each side, fewer at the ends): `kmer_frequencies` of that
    window, for every base at once through running counts."""
    size, half = len(alphabet), window // 2
    codes = _codes(sequence, alphabet)
    bases = np.arange(len(sequence))
    columns = []
    for k in ks:
        index = _kmer_index(codes, size, k)
        # k-mers starting in [first, last] lie inside [base - half, base + half]
        first = np.clip(bases - half, 0, len(index))
        last = np.clip(bases + half - k + 1, -1, len(index) - 1)
        valid = np.concatenate([[0], np.cumsum(index >= 0)])
        total = np.maximum(valid[last + 1] - valid[first], 1).astype(np.float32)
        for value in range(size ** k):
            running = np.concatenate([[0], np.cumsum(index == value)])
            columns.append(np.maximum(running[last + 1] - running[first], 0) / total)
    return np.stack(columns, axis=1).astype(np.float32) if columns else np.zeros((len(sequence), 0), np.float32)


def protein_features(sequences: Sequence[str], ids: Sequence[str]) -> np.ndarray:
    return kmer_frequencies(sequences, AMINO_ACIDS, (1, 2))


def dna_features(sequences: Sequence[str], ids: Sequence[str]) -> np.ndarray:
    return kmer_frequencies(sequences, NUCLEOTIDES, (1, 2, 3, 4))


def morgan_fingerprints(sequences: Sequence[str], ids: Sequence[str]) -> np.ndarray:
    """(N, 2048) Morgan bits; a SMILES RDKit cannot parse is an InputError naming its record."""
    molecules = [molecule(smiles, record) for smiles, record in zip(sequences, ids)]  # a BiotfError without RDKit
    return fingerprint_bits(molecules, MORGAN_RADIUS, MORGAN_BITS).astype(np.float32)


# tokenizer kind -> (description, featurizer(sequences, ids))
BASELINES: dict[str, tuple[str, Callable[[Sequence[str], Sequence[str]], np.ndarray]]] = {
    "protein": ("amino-acid composition + dipeptides", protein_features),
    "dna": ("k-mer frequencies, k=1..4", dna_features),
    "smiles": (f"Morgan fingerprints (r={MORGAN_RADIUS}, {MORGAN_BITS} bits)", morgan_fingerprints),
}


def baseline(kind: str) -> tuple[str, Callable[[Sequence[str], Sequence[str]], np.ndarray]]:
    """The baseline for a tokenizer kind (or a baseline name); ConfigError lists the known ones."""
    if kind not in BASELINES:
        raise ConfigError("baseline", kind, allowed=", ".join([*BASELINES, "none"]),
                          reason="no classical baseline for this kind of sequence")
    return BASELINES[kind]
