"""The MOSES metrics of a generated set of molecules, one function each (Polykovskiy et al. 2020, "Molecular Sets
(MOSES): a benchmarking platform for molecular generation models", Front. Pharmacol.; definitions as in its code,
molecularsets/moses `moses/metrics/metrics.py` and `moses/metrics/utils.py`, written again here).

- validity: the fraction of all rows RDKit parses (an empty row is invalid);
- unique@k: the fraction of distinct canonical SMILES among the first k valid molecules (over fewer when fewer
  are valid, which the caller says, as MOSES warns);
- novelty: the fraction of the distinct valid molecules whose canonical SMILES is not in the training set;
- IntDiv_p: 1 - mean over molecules i of (mean over j of T(i, j)^p)^(1/p), all pairs of the valid set (itself
  included), T the Tanimoto similarity of Morgan fingerprints (radius 2, 1024 bits; two empty ones count as 1);
- SNN: the mean over generated molecules of their largest Tanimoto similarity to the reference set;
- Frag / Scaf: the cosine similarity of the count vectors of BRICS fragments / Bemis-Murcko scaffolds (with at
  least 2 rings, as MOSES's `compute_scaffolds`) of the generated and the reference set;
- FCD: `chemnet.frechet_distance` of the ChemNet activations (`chemnet`); Filters: `filters.passes_filters`.

Fingerprints are kept packed (numpy.packbits, 128 bytes a molecule) and unpacked a block at a time.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from biotf.chemistry import fingerprint_bits, murcko_scaffold, tanimoto

MORGAN_RADIUS = 2
MORGAN_BITS = 1024
BLOCK = 4096  # fingerprints unpacked together: BLOCK x 1024 float32 (16 MiB)


def fingerprints(molecules: Iterable) -> np.ndarray:
    """(n, 128) uint8: the packed Morgan fingerprints (radius 2, 1024 bits) of RDKit molecules."""
    return np.packbits(fingerprint_bits(molecules, MORGAN_RADIUS, MORGAN_BITS).astype(bool), axis=1)


def _unpacked(packed: np.ndarray) -> np.ndarray:
    return np.unpackbits(packed, axis=1).astype(np.float32)


def tanimoto_blocks(reference: np.ndarray, generated: np.ndarray):
    """Yield the (reference block x generated) Tanimoto matrices of packed fingerprints, a block of reference rows
    at a time; 0/0 (two empty fingerprints) is 1, as MOSES's `average_agg_tanimoto`."""
    gen = _unpacked(generated)
    gen_bits = gen.sum(1)
    for start in range(0, len(reference), BLOCK):
        ref = _unpacked(reference[start:start + BLOCK])
        yield tanimoto(ref @ gen.T, ref.sum(1), gen_bits, empty=1.0)


def nearest_neighbour_similarity(reference: np.ndarray, generated: np.ndarray) -> float:
    """SNN: mean over the generated fingerprints of their largest Tanimoto similarity to a reference one."""
    best = np.zeros(len(generated))
    for block in tanimoto_blocks(reference, generated):
        best = np.maximum(best, block.max(0))
    return float(best.mean())


def internal_diversity(packed: np.ndarray, p: int = 1) -> float:
    """IntDiv_p: 1 - mean_i (mean_j T(i, j)^p)^(1/p) over all pairs of the set, itself included."""
    total = np.zeros(len(packed))
    for block in tanimoto_blocks(packed, packed):
        total += (block ** p).sum(0)
    return float(1 - ((total / len(packed)) ** (1 / p)).mean())


def fragments(molecule) -> list[str]:
    """The SMILES of the BRICS fragments of a molecule (RDKit's FragmentOnBRICSBonds, as MOSES's `fragmenter`:
    dummy atoms labelled with the BRICS environment mark the cuts; a molecule without BRICS bonds is one piece)."""
    from rdkit import Chem

    return Chem.MolToSmiles(Chem.FragmentOnBRICSBonds(molecule)).split(".")


def scaffold(molecule, min_rings: int = 2) -> str | None:
    """The Bemis-Murcko scaffold's canonical SMILES, or None when it has fewer than `min_rings` rings."""
    try:
        smiles = murcko_scaffold(molecule, isomeric=True, min_rings=min_rings)
    except (ValueError, RuntimeError):  # MOSES drops a molecule RDKit cannot reduce, as here
        return None
    return smiles or None


def fragment_counts(molecules: Iterable) -> Counter:
    counts: Counter = Counter()
    for molecule in molecules:
        counts.update(fragments(molecule))
    return counts


def scaffold_counts(molecules: Iterable) -> Counter:
    counts = Counter(scaffold(molecule) for molecule in molecules)
    counts.pop(None, None)
    return counts


def cosine_similarity(reference: dict[str, int], generated: dict[str, int]) -> float:
    """Cosine similarity of two count vectors over the union of their keys; NaN when either is empty (MOSES)."""
    if not reference or not generated:
        return math.nan
    dot = sum(count * reference.get(key, 0) for key, count in generated.items())
    norms = math.sqrt(sum(c * c for c in reference.values())) * math.sqrt(sum(c * c for c in generated.values()))
    return dot / norms


def unique_at(canonical: Sequence[str], k: int) -> float:
    """unique@k: distinct among the first k canonical SMILES of the valid molecules (all of them when fewer)."""
    first = canonical[:k]
    return len(set(first)) / len(first)


def novelty(canonical: Iterable[str], training_hashes: np.ndarray) -> float:
    """The fraction of the distinct canonical SMILES whose hash (`smiles_hashes`) is not among the training set's
    (sorted) hashes."""
    distinct = np.unique(smiles_hashes(set(canonical)))
    found = np.isin(distinct, training_hashes, assume_unique=True)
    return float(1 - found.mean())


def smiles_hashes(smiles: Iterable[str]) -> np.ndarray:
    """uint64 hashes of SMILES strings (the first 8 bytes of BLAKE2b): a training set of millions compared in
    memory and cached as numbers; two different SMILES share one with probability about n^2 / 2^65."""
    from hashlib import blake2b

    return np.fromiter((int.from_bytes(blake2b(s.encode(), digest_size=8).digest(), "little") for s in smiles),
                       dtype=np.uint64)
