"""Variants of a reference sequence: parsing, checking against the reference, applying, strand flipping.

Two notations, both numbered from `offset` (the number of the reference's first residue; 1 by default,
as fair-esm's `--offset-idx`; TEM-1's Ambler-numbered DMS files use 24):
- substitution codes `A42G`, multi-mutants joined by `:` (`A42G:K50R`, ProteinGym's layout);
- `pos ref alt` (VCF-like): `ref` bases at `pos` become `alt`, so `12 A G` is an SNV, `12 AT A` a deletion
  and `12 A ATG` an insertion; `-` or an empty field is the empty allele.
A mutation whose `ref` differs from the reference there is refused with an `InputError` naming the variant,
never scored: a wrong numbering scores the wrong residues silently otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from biotf.errors import InputError

_CODE = re.compile(r"([A-Za-z*])(-?\d+)([A-Za-z*])")
EMPTY_ALLELES = ("", "-", ".")


@dataclass(frozen=True)
class Mutation:
    """`ref` at 0-based `start` of the reference becomes `alt` (equal lengths: a substitution)."""

    start: int
    ref: str
    alt: str

    @property
    def is_substitution(self) -> bool:
        return len(self.ref) == len(self.alt) == 1


@dataclass(frozen=True)
class Variant:
    """One scored item: its name as written, and its mutations sorted by position (none: the reference itself)."""

    name: str
    mutations: tuple[Mutation, ...]

    @property
    def is_substitution(self) -> bool:
        """Every mutation replaces one residue by one residue: token positions stay where they were."""
        return all(m.is_substitution for m in self.mutations)

    def code(self, offset: int = 1) -> str:
        """`A42G:K50R` for substitutions; `42AT>A` (deletion), `42->GG` (insertion) for the others."""
        return ":".join(f"{m.ref}{m.start + offset}{m.alt}" if m.is_substitution
                        else f"{m.start + offset}{m.ref or '-'}>{m.alt or '-'}" for m in self.mutations)


def parse_code(text: str, offset: int = 1, name: str | None = None) -> list[Mutation]:
    """`A42G` or `A42G:K50R` (substitutions, numbered from `offset`) as Mutations, unchecked."""
    mutations = []
    for part in text.strip().split(":"):
        match = _CODE.fullmatch(part.strip())
        if match is None:
            raise InputError(f"variant {name or text!r}: cannot read mutation {part!r} "
                             "(expected <ref><position><alt> like A42G, several joined by ':')")
        ref, position, alt = match.groups()
        mutations.append(Mutation(int(position) - offset, ref.upper(), alt.upper()))
    return mutations


def parse_pos_ref_alt(position: str, ref: str, alt: str, offset: int = 1, name: str | None = None) -> Mutation:
    """One `pos ref alt` mutation, unchecked; `-`, `.` or an empty field is the empty allele."""
    try:
        start = int(position) - offset
    except ValueError:
        raise InputError(f"variant {name or position!r}: position {position!r} is not an integer") from None
    ref, alt = ("" if a.strip() in EMPTY_ALLELES else a.strip().upper() for a in (ref, alt))
    if not ref and not alt:
        raise InputError(f"variant {name or position!r}: both alleles are empty")
    return Mutation(start, ref, alt)


def make_variant(reference: str, mutations: Sequence[Mutation], name: str, offset: int = 1) -> Variant:
    """A Variant after checking each mutation against `reference`: inside it, its `ref` matching, no overlaps."""
    ordered = sorted(mutations, key=lambda m: (m.start, len(m.ref)))
    end = -1
    for mutation in ordered:
        number = mutation.start + offset
        if mutation.start < 0 or mutation.start + len(mutation.ref) > len(reference):
            raise InputError(f"variant {name!r}: position {number} is outside the reference "
                             f"(positions {offset}..{len(reference) + offset - 1} with offset {offset})")
        found = reference[mutation.start:mutation.start + len(mutation.ref)].upper()
        if found != mutation.ref:
            written = f"{mutation.ref}{number}{mutation.alt}" if mutation.is_substitution else \
                f"{number} {mutation.ref or '-'} {mutation.alt or '-'}"
            raise InputError(f"variant {name!r}: mutation {written} does not match the reference, which has "
                             f"{found!r} at position {number} (numbered from offset {offset})")
        if mutation.start < end:
            raise InputError(f"variant {name!r}: mutations overlap at position {number}")
        end = mutation.start + len(mutation.ref)
    return Variant(name, tuple(ordered))


def apply(reference: str, variant: Variant) -> str:
    """The variant's sequence (mutations applied right to left, so earlier positions stay valid)."""
    sequence = reference
    for mutation in reversed(variant.mutations):
        sequence = sequence[:mutation.start] + mutation.alt + sequence[mutation.start + len(mutation.ref):]
    return sequence


def difference(reference: str, sequence: str, name: str) -> Variant:
    """The substitutions turning `reference` into the equally long `sequence` (a variant given as its sequence)."""
    if len(sequence) != len(reference):
        raise InputError(f"variant {name!r}: its sequence has {len(sequence)} residues, the reference "
                         f"{len(reference)}; give insertions and deletions as 'pos ref alt' instead")
    return Variant(name, tuple(Mutation(i, a.upper(), b.upper()) for i, (a, b) in enumerate(zip(reference, sequence))
                               if a.upper() != b.upper()))


def reverse_strand(reference_length: int, variant: Variant) -> Variant:
    """The same variant on the reverse complement of a reference of `reference_length` bases."""
    from biotf.tokenizers import reverse_complement

    flipped = (Mutation(reference_length - m.start - len(m.ref), reverse_complement(m.ref, variant.name),
                        reverse_complement(m.alt, variant.name)) for m in variant.mutations)
    return Variant(variant.name, tuple(sorted(flipped, key=lambda m: (m.start, len(m.ref)))))
