"""Per-base genome annotation from GenBank features: the labels of `biotf experiment genome-annotation`.

Every base gets one of ANNOTATION_CLASSES (cds_plus, cds_minus, rna, other), by these rules:

- CDS features label their bases by each part's own strand: a trans-spliced CDS (chloroplast rps12) has parts on
  both strands. tRNA and rRNA features label `rna` on either strand. Other feature types (gene, mRNA, misc_feature,
  ...) label nothing: a `gene` spans its introns, a `misc_feature` is not a class here.
- Joins (Biopython's CompoundLocation) label every part. A feature across the origin of a circular genome, written
  `join(3981..5386,1..136)`, comes from Biopython as two parts, and both are labelled.
- Overlaps: CDS wins over rna, rna over other. A base under CDS of both strands is `cds_plus` (a fixed tie-break:
  one class per base), counted as `bases_cds_both_strands`; rna bases under a CDS as `rna_bases_under_cds`.
- Fuzzy ends (`<1`, `>100`) are taken at the position written, counted as `fuzzy_ends`.
- A CDS / tRNA / rRNA with `/pseudo` or `/pseudogene` labels nothing (its bases stay `other` unless another
  feature covers them), counted as `pseudo_features_skipped`: a pseudogene is not a working gene, and gene finders
  are scored on working ones.

A part outside the sequence, a feature without a location and a CDS part without a strand are InputErrors naming
the file, the record and the feature. `Gene` keeps each CDS (pseudogenes excepted) for gene-level recall.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from biotf.io.readers import read_genbank_features
from biotf.errors import InputError

ANNOTATION_CLASSES = ("cds_plus", "cds_minus", "rna", "other")
CDS_PLUS, CDS_MINUS, RNA, OTHER = range(len(ANNOTATION_CLASSES))
RNA_TYPES = ("tRNA", "rRNA")
PSEUDO_QUALIFIERS = ("pseudo", "pseudogene")


@dataclass(frozen=True)
class Gene:
    """A CDS: its bases (0-based positions, in the order of its parts) and the class each must be called."""

    name: str
    positions: np.ndarray
    classes: np.ndarray


@dataclass
class AnnotatedGenome:
    """A sequence with one class id (index into ANNOTATION_CLASSES) per base, its CDS genes and what the labelling
    rules did (`counts`)."""

    id: str
    sequence: str
    labels: np.ndarray
    genes: list[Gene]
    circular: bool
    counts: Counter = field(default_factory=Counter)

    def __len__(self) -> int:
        return len(self.sequence)

    def piece(self, start: int, length: int) -> AnnotatedGenome:
        """Bases start .. start + length - 1, read across the origin of a circular genome; the genes whose every
        base lies in the piece, in its coordinates (the others counted as `genes_cut_by_piece`)."""
        size = len(self)
        if not 0 < length <= size or not (0 <= start < size) or (not self.circular and start + length > size):
            raise InputError(f"record {self.id!r}: piece {start}+{length} does not fit a "
                             f"{'circular' if self.circular else 'linear'} sequence of {size} bases")
        index = (start + np.arange(length)) % size
        sequence = (self.sequence + self.sequence if start + length > size else self.sequence)[start:start + length]
        genes, counts = [], Counter()
        for gene in self.genes:
            shifted = (gene.positions - start) % size
            if bool((shifted < length).all()):
                genes.append(Gene(gene.name, shifted, gene.classes))
            elif bool((shifted < length).any()):
                counts["genes_cut_by_piece"] += 1
        return AnnotatedGenome(f"{self.id}:{start}+{length}", sequence, self.labels[index], genes, False, counts)


def _describe(feature, number: int) -> str:
    names = [feature.qualifiers.get(key, [None])[0] for key in ("locus_tag", "gene", "product")]
    name = next((n for n in names if n), None)
    return f"feature {number} ({feature.type}{f' {name}' if name else ''}, {feature.location})"


def _name(feature, number: int) -> str:
    for key in ("locus_tag", "gene", "protein_id", "product"):
        if feature.qualifiers.get(key):
            return str(feature.qualifiers[key][0])
    return f"CDS_{number}"


def label_bases(features: list, length: int, record: str, source: str | Path = "<record>"
                ) -> tuple[np.ndarray, list[Gene], Counter]:
    """(one class id per base, the CDS genes, counts) of a record's Biopython features (module docstring rules)."""
    from Bio.SeqFeature import AfterPosition, BeforePosition, OneOfPosition, WithinPosition

    fuzzy = (BeforePosition, AfterPosition, WithinPosition, OneOfPosition)
    plus, minus, rna = (np.zeros(length, bool) for _ in range(3))
    genes: list[Gene] = []
    counts: Counter = Counter()
    for number, feature in enumerate(features, 1):
        if feature.type != "CDS" and feature.type not in RNA_TYPES:
            continue
        where = f"{source}: record {record!r}: {_describe(feature, number)}"
        if any(key in feature.qualifiers for key in PSEUDO_QUALIFIERS):
            counts["pseudo_features_skipped"] += 1
            continue
        if feature.location is None:
            raise InputError(f"{where}: has no location Biopython could read")
        counts[f"features_{'cds' if feature.type == 'CDS' else 'rna'}"] += 1
        positions, classes = [], []
        for part in feature.location.parts:
            start, end = int(part.start), int(part.end)
            counts["fuzzy_ends"] += isinstance(part.start, fuzzy) + isinstance(part.end, fuzzy)
            if not 0 <= start < end <= length:
                raise InputError(f"{where}: part {start + 1}..{end} lies outside the sequence of {length} bases")
            if feature.type in RNA_TYPES:
                rna[start:end] = True
                continue
            if part.strand not in (1, -1):
                raise InputError(f"{where}: part {start + 1}..{end} has no strand (a CDS is read on one strand)")
            (plus if part.strand == 1 else minus)[start:end] = True
            positions.append(np.arange(start, end))
            classes.append(np.full(end - start, CDS_PLUS if part.strand == 1 else CDS_MINUS, np.int8))
        if feature.type == "CDS":
            genes.append(Gene(_name(feature, number), np.concatenate(positions), np.concatenate(classes)))
    labels = np.full(length, OTHER, np.int8)
    labels[rna] = RNA
    labels[minus] = CDS_MINUS
    labels[plus] = CDS_PLUS
    counts["bases_cds_both_strands"] += int((plus & minus).sum())
    counts["rna_bases_under_cds"] += int((rna & (plus | minus)).sum())
    for class_id, name in enumerate(ANNOTATION_CLASSES):
        counts[f"bases_{name}"] += int((labels == class_id).sum())
    return labels, genes, counts


def read_annotated(path: str | Path) -> list[AnnotatedGenome]:
    """Every record of a GenBank file, labelled per base (module docstring rules)."""
    genomes = []
    for record, features in read_genbank_features(path):
        labels, genes, counts = label_bases(features, len(record.sequence), record.id, path)
        genomes.append(AnnotatedGenome(record.id, record.sequence, labels, genes,
                                       record.metadata.get("topology") == "circular", counts))
    return genomes
