"""Per-base labels from GenBank features: a hand-checked record (joins, complement, wrap-around, overlaps, fuzzy
ends, a pseudogene) and the three shipped genomes checked against Biopython's own reading of each location."""

from __future__ import annotations

import numpy as np
import pytest

from biotf_recipes.experiments.annotation_labels import ANNOTATION_CLASSES, CDS_MINUS, CDS_PLUS, RNA, read_annotated
from biotf.errors import InputError

FEATURES = """\
     source          1..30
     CDS             join(2..4,7..9)
                     /gene="a"
     CDS             complement(12..17)
                     /gene="b"
     tRNA            15..20
                     /gene="trnX"
     CDS             join(28..30,1..2)
                     /gene="c"
     CDS             10..11
                     /gene="d"
     CDS             complement(11..12)
                     /gene="e"
     CDS             22..24
                     /gene="f"
                     /pseudo
     rRNA            <25..>26
                     /gene="rrnX"
"""


def genbank(features: str, topology: str = "circular", sequence: str = "acgtacgtac gtacgtacgt acgtacgtac") -> str:
    return (f"LOCUS       TEST1                     30 bp    DNA     {topology:8s} BCT 01-JAN-2000\n"
            "DEFINITION  hand-made record.\nACCESSION   TEST1\nVERSION     TEST1.1\n"
            "FEATURES             Location/Qualifiers\n" + features
            + f"ORIGIN\n        1 {sequence}\n//\n")


# Worked by hand from FEATURES, 0-based: P = cds_plus, M = cds_minus, R = rna, O = other.
#   a: 1-3, 6-8 (+); b: 11-16 (-); tRNA 14-19 (CDS wins on 14-16); c: 27-29 and 0-1 (+, across the origin);
#   d: 9-10 (+); e: 10-11 (-): base 10 is on both strands -> cds_plus; f is a pseudogene (21-23 stay other);
#   rRNA 24-25 with fuzzy ends.
EXPECTED = "PPPPOOPPPPPMMMMMMRRROOOORROPPP"


@pytest.fixture
def record(tmp_path):
    path = tmp_path / "test.gb"
    path.write_text(genbank(FEATURES))
    return path


def test_hand_checked_record(record):
    (genome,) = read_annotated(record)
    letters = {CDS_PLUS: "P", CDS_MINUS: "M", RNA: "R", ANNOTATION_CLASSES.index("other"): "O"}
    assert "".join(letters[int(c)] for c in genome.labels) == EXPECTED
    assert genome.circular and genome.sequence.upper() == "ACGT" * 7 + "AC"
    counts = genome.counts
    assert (counts["bases_cds_both_strands"], counts["rna_bases_under_cds"], counts["pseudo_features_skipped"],
            counts["fuzzy_ends"], counts["features_cds"], counts["features_rna"]) == (1, 3, 1, 2, 5, 2)
    assert sum(counts[f"bases_{name}"] for name in ANNOTATION_CLASSES) == 30
    genes = {gene.name: gene for gene in genome.genes}
    assert sorted(genes) == ["a", "b", "c", "d", "e"]  # the pseudogene f is no gene to find
    assert genes["c"].positions.tolist() == [27, 28, 29, 0, 1]
    assert set(genes["b"].classes.tolist()) == {CDS_MINUS} and set(genes["a"].classes.tolist()) == {CDS_PLUS}


def test_piece_across_the_origin_keeps_whole_genes(record):
    (genome,) = read_annotated(record)
    piece = genome.piece(25, 10)  # bases 25..29 then 0..4
    assert piece.sequence == (genome.sequence * 2)[25:35]
    assert piece.labels.tolist() == genome.labels[[25, 26, 27, 28, 29, 0, 1, 2, 3, 4]].tolist()
    assert [(g.name, g.positions.tolist()) for g in piece.genes] == [("c", [2, 3, 4, 5, 6])]
    assert piece.counts["genes_cut_by_piece"] == 1  # a: 1-3 inside, 6-8 outside
    with pytest.raises(InputError, match="does not fit a linear sequence"):
        piece.piece(5, 10)


def test_part_outside_the_sequence_names_file_record_and_feature(tmp_path):
    path = tmp_path / "bad.gb"
    path.write_text(genbank('     CDS             complement(25..40)\n                     /gene="z"\n'))
    with pytest.raises(InputError, match=r"bad\.gb: record 'TEST1\.1': feature 1 \(CDS z.*\): part 25\.\.40 lies "
                                         r"outside the sequence of 30 bases"):
        read_annotated(path)


def test_not_genbank_is_one_input_error(tmp_path):
    path = tmp_path / "empty.gb"
    path.write_text("")
    with pytest.raises(InputError, match="empty.gb: no records found"):
        read_annotated(path)


@pytest.mark.parametrize("name, cds, plus, minus, rna", [
    ("biopython_NC_000932_Athaliana_chloroplast.gb", 85, 24505, 54751, 12065),
    ("biopython_NC_005816_Ypestis_pPCP1.gb", 10, 4163, 1646, 0),
    ("biopython_NC_001422_phiX174.gbk", 11, 5169, 0, 0),
])
def test_shipped_genomes_against_biopython(shared_data, name, cds, plus, minus, rna):
    """Per class, the bases Biopython's own iteration of each location gives (`list(feature.location)`, which walks
    joins, complements and the origin its own way), with the stated precedence: CDS + over CDS - over rna."""
    from Bio import SeqIO

    path = shared_data / "dna" / name
    (genome,) = read_annotated(path)
    entry = SeqIO.read(path, "genbank")
    on = {key: set() for key in ("plus", "minus", "rna")}
    for feature in entry.features:
        if feature.type == "CDS":
            for part in feature.location.parts:
                on["plus" if part.strand == 1 else "minus"].update(part)  # a part iterates its positions
        elif feature.type in ("tRNA", "rRNA"):
            on["rna"].update(feature.location)
    expected = {"cds_plus": on["plus"], "cds_minus": on["minus"] - on["plus"],
                "rna": on["rna"] - on["plus"] - on["minus"]}
    for class_name, positions in expected.items():
        found = set(np.flatnonzero(genome.labels == ANNOTATION_CLASSES.index(class_name)).tolist())
        assert found == positions, class_name
    assert (len(expected["cds_plus"]), len(expected["cds_minus"]), len(expected["rna"])) == (plus, minus, rna)
    assert len(genome.genes) == cds == sum(f.type == "CDS" for f in entry.features)
    for gene, feature in zip(genome.genes, [f for f in entry.features if f.type == "CDS"]):
        assert sorted(gene.positions.tolist()) == sorted(int(p) for p in feature.location)
    assert genome.circular and len(genome.sequence) == len(entry.seq)


def test_phix_genes_across_the_origin(shared_data):
    (genome,) = read_annotated(shared_data / "dna/biopython_NC_001422_phiX174.gbk")
    across = [gene for gene in genome.genes if {0, len(genome) - 1} <= set(gene.positions.tolist())]
    assert len(across) == 3  # A, A* and B's joins 3981..5386,1..136 etc.
    assert all(gene.positions[0] > gene.positions[-1] for gene in across)  # they run through the origin
