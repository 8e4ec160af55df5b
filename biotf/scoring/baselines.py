"""The trivial baseline a variant-effect score must beat: a substitution matrix (BLOSUM62 by default).

A variant's baseline score is the sum of matrix[ref][alt] over its substitutions (Henikoff & Henikoff 1992,
read from Biopython's `Bio.Align.substitution_matrices`). It knows nothing of the protein: a model that does
not beat it has learned nothing about this protein's fitness that the amino-acid alphabet does not say.
"""

from __future__ import annotations

from functools import lru_cache

from biotf.errors import ConfigError, InputError
from biotf.scoring.mutations import Variant


@lru_cache(maxsize=4)
def _matrix(name: str):
    from Bio.Align import substitution_matrices

    if name not in substitution_matrices.load():
        raise ConfigError("matrix", name, allowed=", ".join(substitution_matrices.load()))
    return substitution_matrices.load(name)


def substitution_score(variant: Variant, matrix: str = "BLOSUM62") -> float:
    """Sum of matrix[ref][alt] over the variant's substitutions; indels have no matrix entry and are refused."""
    table = _matrix(matrix)
    total = 0.0
    for mutation in variant.mutations:
        if not mutation.is_substitution or mutation.ref not in table.alphabet or mutation.alt not in table.alphabet:
            raise InputError(f"variant {variant.name!r}: {variant.code()} has no {matrix} entry")
        total += float(table[mutation.ref][mutation.alt])
    return total
