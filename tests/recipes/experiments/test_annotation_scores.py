"""Genome-annotation scores (hand-worked F1, average precision, gene recall) and the two anchors (k-mer logistic,
Prodigal through pyrodigal)."""

from __future__ import annotations

import numpy as np
import pytest

from biotf_recipes.experiments.annotation_scores import average_precision, genes_found, score_annotation
from biotf_recipes.experiments.annotation_anchors import (KmerLogistic, prodigal_calls, prodigal_finder,
                                                       reverse_complement, reverse_complement_classes)
from biotf_recipes.experiments.annotation_labels import (ANNOTATION_CLASSES, CDS_MINUS, CDS_PLUS, OTHER, RNA, Gene,
                                                read_annotated)
from biotf.errors import InputError


def test_average_precision_by_hand():
    # ranked 0.9 (T) 0.8 (F) 0.7 (T) 0.1 (F): precision 1 at recall 1/2, 2/3 at recall 1 -> 1/2 * 1 + 1/2 * 2/3
    assert average_precision(np.array([1, 0, 1, 0]), np.array([0.9, 0.8, 0.7, 0.1])) == pytest.approx(5 / 6)
    # tied scores are one threshold: P 1/2 at R 1/2 (both 0.5s), then P 2/3 at R 1 -> 1/4 + 1/3
    assert average_precision(np.array([1, 0, 1]), np.array([0.5, 0.5, 0.2])) == pytest.approx(7 / 12)
    assert average_precision(np.array([0, 0]), np.array([0.5, 0.2])) is None


def test_scores_by_hand():
    labels = np.array([CDS_PLUS] * 4 + [CDS_MINUS] * 3 + [OTHER] * 3)
    calls = np.array([CDS_PLUS, CDS_PLUS, CDS_PLUS, OTHER, CDS_MINUS, CDS_PLUS, OTHER, OTHER, OTHER, CDS_PLUS])
    genes = [Gene("p", np.arange(4), np.full(4, CDS_PLUS)), Gene("m", np.arange(4, 7), np.full(3, CDS_MINUS))]
    scores = score_annotation(labels, calls, None, genes)
    # cds_plus: 3 true positives, 4 true, 5 called -> 6/9; cds_minus: 1, 3, 1 -> 2/4; other: 2, 3, 4 -> 4/7
    assert scores.f1 == pytest.approx({"cds_plus": 2 / 3, "cds_minus": 0.5, "rna": None, "other": 4 / 7})
    assert scores.auprc == {name: None for name in ANNOTATION_CLASSES}
    # p: 3/4 of its bases called cds_plus < 0.8; m: 1/3
    assert (scores.genes, scores.genes_found, scores.gene_recall) == (2, 0, 0.0)
    assert genes_found(genes, calls, fraction=0.75) == 1
    limited = score_annotation(labels, calls, None, genes, predicted=("cds_plus", "other"))
    assert limited.f1["cds_minus"] is None and limited.f1["cds_plus"] == pytest.approx(2 / 3)
    with pytest.raises(InputError, match="9 calls"):
        score_annotation(labels, calls[:9], None, genes)


def test_trans_spliced_gene_is_found_strand_by_part():
    gene = Gene("rps12", np.array([0, 1, 2, 7, 8]), np.array([CDS_MINUS] * 3 + [CDS_PLUS] * 2))
    calls = np.array([CDS_MINUS] * 3 + [OTHER] * 4 + [CDS_PLUS] * 2)
    assert genes_found([gene], calls) == 1
    assert genes_found([gene], np.where(calls == CDS_PLUS, CDS_MINUS, calls)) == 0  # the + part on the - strand


def test_reverse_complement_swaps_strands():
    assert reverse_complement("AACGTn") == "nACGTT"
    labels = np.array([CDS_PLUS, CDS_MINUS, RNA, OTHER])
    assert reverse_complement_classes(labels).tolist() == [OTHER, RNA, CDS_PLUS, CDS_MINUS]
    scores = np.eye(4)[labels]
    np.testing.assert_array_equal(reverse_complement_classes(scores), np.eye(4)[reverse_complement_classes(labels)])


def test_kmer_logistic_learns_composition_and_treats_strands_alike():
    rng = np.random.default_rng(0)
    pieces = [("A", CDS_PLUS), ("T", CDS_MINUS), ("G", OTHER)]
    sequence, labels = "", []
    for _ in range(6):
        for letter, label in pieces:
            block = "".join(rng.choice(list("ACGT" + letter * 6), 120))
            sequence += block
            labels += [label] * len(block)
    baseline = KmerLogistic(window=30, stride=2).fit([sequence], [np.array(labels)])
    predicted = baseline.predict(sequence)
    assert predicted.shape == (len(sequence), 4) and np.allclose(predicted.sum(1), 1)
    assert np.mean(predicted.argmax(1) == np.array(labels)) > 0.8
    np.testing.assert_allclose(baseline.predict(reverse_complement(sequence)), reverse_complement_classes(predicted),
                               atol=1e-9)


def test_prodigal_calls_are_its_genes(shared_data):
    pytest.importorskip("pyrodigal")
    (phix,) = read_annotated(shared_data / "dna/biopython_NC_001422_phiX174.gbk")
    finder = prodigal_finder("meta")
    genes = finder.find_genes(phix.sequence.encode())
    calls, scores = prodigal_calls(finder, phix.sequence)
    covered = np.zeros(len(phix), bool)
    for gene in genes:
        covered[gene.begin - 1:gene.end] = True
    assert ((calls != OTHER) == covered).all() and set(np.unique(calls[covered])) <= {CDS_PLUS, CDS_MINUS}
    assert np.allclose(scores[:, OTHER], 1 - scores[:, :2].max(1)) and (scores[:, RNA] == 0).all()
    result = score_annotation(phix.labels, calls, scores, phix.genes, ("cds_plus", "cds_minus", "other"))
    assert result.f1["cds_plus"] > 0.9 and result.genes_found >= 9  # Prodigal finds phiX's genes
    with pytest.raises(InputError, match="trains on >= 20000 bases, given 5386"):
        prodigal_finder("single", phix.sequence)
