"""The classical neighbour of each modality, as sets compared by Jaccard similarity (|a & b| / |a | b|):

- smiles: Tanimoto similarity of Morgan fingerprints, radius 2, 2048 bits (RDKit; ECFP4-like, the usual
  molecular similarity, e.g. in MOSES's SNN metric); Tanimoto of bit vectors is the Jaccard of their on-bits;
- protein: Jaccard of the sets of 3-mers (20^3 = 8,000 possible; residues outside the 20 break k-mers);
- dna: Jaccard of the sets of 5-mers (4^5 = 1,024 possible; shorter k saturates: a 60-nt window holds most
  3-mers).

`classical_sets` gives the 0/1 rows that `neighbours.exact_search(..., metric="jaccard")` compares, and which
records can take part: a SMILES RDKit cannot parse has no fingerprint.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from biotf.analysis.feature_baselines import (AMINO_ACIDS, MORGAN_BITS, MORGAN_RADIUS, NUCLEOTIDES, kmer_frequencies)
from biotf.chemistry import fingerprint_bits, molecules
from biotf.errors import ConfigError, InputError
from biotf.naming import parameter

KMER_SIZES = {"protein": (AMINO_ACIDS, 3), "dna": (NUCLEOTIDES, 5)}
KINDS = ("smiles", *KMER_SIZES)


def describe(kind: str) -> str:
    """The similarity of `kind`, as a table row names it."""
    if kind == "smiles":
        return f"Tanimoto, Morgan fingerprints (r={MORGAN_RADIUS}, {MORGAN_BITS} bits)"
    return f"k-mer identity (Jaccard of {KMER_SIZES[kind][1]}-mer sets)"


def classical_sets(kind: str, sequences: Sequence[str], ids: Sequence[str],
                   invalid_smiles: str = "skip") -> tuple[np.ndarray, np.ndarray]:
    """(0/1 rows of the usable records, a mask of which records are usable) for tokenizer kind `kind`; a SMILES
    RDKit cannot parse is not usable (`invalid_smiles` "skip") or refused in one line ("error", `--invalid-smiles`)."""
    if kind not in KINDS:
        raise ConfigError(parameter("classical"), kind, allowed=" | ".join([*KINDS, "none"]),
                          reason="no classical neighbour for this kind of sequence")
    if kind == "smiles":
        parsed, _ = molecules(sequences, ids, invalid_smiles, parameter("invalid_smiles"))
        usable = np.array([mol is not None for mol in parsed], bool)
        if not usable.any():
            raise InputError("no SMILES of the file can be parsed by RDKit: no Morgan fingerprints to compare")
        bits = fingerprint_bits([mol for mol in parsed if mol is not None], MORGAN_RADIUS, MORGAN_BITS)
        return (bits > 0).astype(np.float32), usable
    alphabet, k = KMER_SIZES[kind]
    return (kmer_frequencies(sequences, alphabet, (k,)) > 0).astype(np.float32), np.ones(len(sequences), bool)
