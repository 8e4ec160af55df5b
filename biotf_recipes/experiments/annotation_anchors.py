"""The anchors a genome-annotation model is held against: a k-mer logistic baseline and Prodigal.

- k-mer logistic: each base is described by the frequencies of the k-mers (k = 1..3 by default) in the window
  around it (`biotf.analysis.feature_baselines.kmer_window_frequencies`); the probe's multinomial logistic regression
  (standardised features, `biotf.analysis.probe.probe_estimators`) learns the class. Both strands: it trains on each training sequence and its
  reverse complement (cds_plus and cds_minus swapped), and predicts the mean of the forward call and the reverse
  complement's call mapped back, so the two strands are treated alike (as a model trained on reverse complements).
- Prodigal (Hyatt et al. 2010, BMC Bioinformatics 11:119) through `pyrodigal`: its genes become per-base calls
  (cds_plus / cds_minus under a predicted gene; under genes of both strands cds_plus, as in the labels; other
  elsewhere: Prodigal predicts no RNA) and per-base scores (the highest confidence of a gene covering the base on
  that strand, 0 elsewhere; other: 1 - the higher of the two). `single` mode trains Prodigal on a training
  sequence (>= 20 kb, Prodigal's minimum; translation table 11, bacteria and plastids), `meta` mode uses its pre-trained metagenomic profiles, the mode
  Prodigal prescribes for sequences too short to train on.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from biotf.analysis.feature_baselines import NUCLEOTIDES, kmer_window_frequencies
from biotf_recipes.experiments.annotation_labels import ANNOTATION_CLASSES, CDS_MINUS, CDS_PLUS, OTHER
from biotf.errors import BiotfError, ConfigError, InputError

COMPLEMENT = str.maketrans("ACGTNacgtn", "TGCANtgcan")
PRODIGAL_MODES = ("single", "meta")
PRODIGAL_MIN_TRAINING = 20_000  # bases: Prodigal refuses to train on less
TRANSLATION_TABLE = 11  # bacterial, archaeal and plant plastid code


def reverse_complement(sequence: str) -> str:
    return sequence.translate(COMPLEMENT)[::-1]


def reverse_complement_classes(values: np.ndarray) -> np.ndarray:
    """Per-base class ids (or (bases, classes) scores) of the reverse strand: reversed, cds_plus <-> cds_minus."""
    swapped = np.array(values, copy=True)
    if swapped.ndim == 1:
        plus = swapped == CDS_PLUS
        swapped[swapped == CDS_MINUS] = CDS_PLUS
        swapped[plus] = CDS_MINUS
    else:
        swapped[:, [CDS_PLUS, CDS_MINUS]] = swapped[:, [CDS_MINUS, CDS_PLUS]]
    return swapped[::-1]


class KmerLogistic:
    """The k-mer logistic baseline (module docstring): `fit` on labelled sequences, `predict` per-base scores."""

    def __init__(self, ks: Sequence[int] = (1, 2, 3), window: int = 96, stride: int = 3, seed: int = 0):
        if window < 1 or stride < 1 or not ks:
            raise ConfigError("kmer baseline", f"ks={list(ks)} window={window} stride={stride}",
                              "one k or more, window >= 1, stride >= 1")
        self.ks, self.window, self.stride, self.seed = tuple(ks), window, stride, seed
        self.model = None

    def features(self, sequence: str) -> np.ndarray:
        return kmer_window_frequencies(sequence, NUCLEOTIDES, self.ks, self.window)

    def fit(self, sequences: Sequence[str], labels: Sequence[np.ndarray]) -> KmerLogistic:
        """Train on every `stride`-th base of each sequence and of its reverse complement."""
        from biotf.analysis.probe import probe_estimators

        rows, targets = [], []
        for sequence, label in zip(sequences, labels):
            for strand_sequence, strand_labels in ((sequence, label),
                                                   (reverse_complement(sequence), reverse_complement_classes(label))):
                rows.append(self.features(strand_sequence)[::self.stride])
                targets.append(np.asarray(strand_labels)[::self.stride])
        self.model = probe_estimators("classification", self.seed)[0].fit(np.concatenate(rows),
                                                                          np.concatenate(targets))
        return self

    def predict(self, sequence: str) -> np.ndarray:
        """(bases, classes) probabilities, the mean over the two strands; a class absent in training scores 0."""
        if self.model is None:
            raise InputError("the k-mer baseline predicts after fit()")
        forward = self._probabilities(sequence)
        backward = reverse_complement_classes(self._probabilities(reverse_complement(sequence)))
        return (forward + backward) / 2

    def _probabilities(self, sequence: str) -> np.ndarray:
        scores = np.zeros((len(sequence), len(ANNOTATION_CLASSES)), np.float64)
        scores[:, self.model.classes_.astype(int)] = self.model.predict_proba(self.features(sequence))
        return scores


def prodigal_finder(mode: str, training_sequence: str | None = None):
    """A pyrodigal GeneFinder: `single` trained on `training_sequence`, or `meta` with Prodigal's own profiles."""
    try:
        import pyrodigal
    except ImportError:
        raise BiotfError("Prodigal runs through the pyrodigal package: pip install 'biotf[annotation]'") from None
    if mode not in PRODIGAL_MODES:
        raise ConfigError("prodigal mode", mode, " | ".join(PRODIGAL_MODES))
    if mode == "meta":
        return pyrodigal.GeneFinder(meta=True)
    if training_sequence is None or len(training_sequence) < PRODIGAL_MIN_TRAINING:
        raise InputError(f"Prodigal's single mode trains on >= {PRODIGAL_MIN_TRAINING} bases, given "
                         f"{0 if training_sequence is None else len(training_sequence)}: use meta mode")
    finder = pyrodigal.GeneFinder()
    finder.train(training_sequence.encode("ascii"), translation_table=TRANSLATION_TABLE)
    return finder


def prodigal_calls(finder, sequence: str) -> tuple[np.ndarray, np.ndarray]:
    """(per-base class ids, (bases, classes) scores) of the genes `finder` predicts on `sequence` (module
    docstring); scores are gene confidences in [0, 1]."""
    scores = np.zeros((len(sequence), len(ANNOTATION_CLASSES)), np.float64)
    for gene in finder.find_genes(sequence.encode("ascii")):
        column = CDS_PLUS if gene.strand == 1 else CDS_MINUS
        span = slice(gene.begin - 1, gene.end)  # pyrodigal: 1-based, inclusive
        scores[span, column] = np.maximum(scores[span, column], gene.confidence() / 100)
    scores[:, OTHER] = 1 - scores[:, [CDS_PLUS, CDS_MINUS]].max(axis=1)
    calls = np.full(len(sequence), OTHER, np.int8)
    calls[scores[:, CDS_MINUS] > 0] = CDS_MINUS
    calls[scores[:, CDS_PLUS] > 0] = CDS_PLUS
    return calls, scores
