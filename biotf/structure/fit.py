"""Fitting a contact head on real structures (`biotf contacts fit`), for models that have none (Rao et al. 2020).

    stats = fit_file("run_dir/", "structures/", "with_contacts/", names=["1eteA", ...])

Each chain (`chains.read_chain`) is tokenised as `biotf contacts` tokenises a protein, and its every layer x head
map is computed as `predict_contacts` computes it (`contact_features`: symmetrised, APC-corrected), one layer at a
time. The examples are its residue pairs i < j at separation >= MIN_SEPARATION whose residues both have
coordinates; the label is the true contact (C-beta within 8 angstrom). Memory holds every chain's examples
(pairs x n_layers x n_heads float32: about 2 L^2 x layers x heads bytes a chain), never a chain's L^2 x layers x
heads maps beyond one layer's. Every pair is used: nothing is subsampled.

The regression is sklearn's L1-regularised logistic regression (liblinear; `l1_c` is its C, the inverse of the
penalty); most weights come out exactly 0, which is what makes the head readable (which heads see contacts).
The model is saved with the head (`contact_head: true`, `contact_head.regression.*`) into a new directory by
`save_pretrained`: the input model is never touched, and a model that had a head gets the fitted one instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from biotf.checkpoint.loading import LoadedModel, as_loaded
from biotf.checkpoint.store import check_export_directory, save_pretrained
from biotf.io.readers import Record
from biotf.errors import ConfigError, InputError
from biotf.model import Transformer
from biotf.model.heads import attach_contact_head, contact_features
from biotf.progress import counting, reporting, waiting
from biotf.structure.chains import Chain, read_chain, structure_files
from biotf.structure.contact_files import Protein, proteins
from biotf.tokenizers.base import PolicyStats, Tokenizer
from biotf.conventions import counted
from biotf.naming import parameter

MIN_SEPARATION = 6
DEFAULT_L1_C = 0.15


@dataclass
class StructureStats:
    """What was read from the structures, for a summary line."""

    chains: int = 0
    residues: int = 0
    missing: int = 0
    renumbered: int = 0
    nonstandard: int = 0
    policies: PolicyStats = field(default_factory=PolicyStats)

    def summary(self) -> str:
        return (f"{counted(self.chains, 'chain')}, {counted(self.residues, 'residue')} ({self.missing} missing "
                f"residues read as X, {self.nonstandard} non-standard residues as X, {self.renumbered} numbering "
                f"jumps between bonded residues)")


@dataclass
class FitStats:
    """A fit's counts: its structures, examples and the regression's non-zero weights."""

    structures: StructureStats = field(default_factory=StructureStats)
    pairs: int = 0
    contacts: int = 0
    weights: int = 0
    nonzero: int = 0

    def summary(self) -> str:
        return (f"{self.structures.summary()}; {counted(self.pairs, 'residue pair')} at separation >= "
                f"{MIN_SEPARATION}, {self.contacts} in contact; {self.nonzero} of {self.weights} head weights "
                f"non-zero")


def chain_proteins(files: list[Path], tokenizer: Tokenizer, max_length: int | None,
                   stats: StructureStats, progress: bool = False) -> list[tuple[Chain, Protein]]:
    """Every file's chain and its tokenised protein (refused in one line as `biotf contacts` refuses a record); with
    `progress`, the structures read so far on stderr (`biotf.progress`)."""
    with reporting(progress, f"reading {files[0].parent.name if files else 'structures'}", "structures",
                   total=len(files)) as shown:
        chains = [read_chain(path) for path in counting(files, shown)]
    for chain in chains:
        stats.chains += 1
        stats.residues += len(chain.sequence)
        stats.missing += chain.missing
        stats.renumbered += chain.renumbered
        stats.nonstandard += chain.nonstandard
    records = [Record(chain.name, chain.sequence, {}, index) for index, chain in enumerate(chains)]
    source = files[0].parent if files else None
    return list(zip(chains, proteins(records, tokenizer, max_length, stats.policies, source)))


def scored_pairs(chain: Chain, min_separation: int = MIN_SEPARATION) -> tuple[np.ndarray, np.ndarray]:
    """0-based (i, j), i + min_separation <= j, of the pairs whose residues both have coordinates."""
    rows, columns = np.triu_indices(len(chain.sequence), k=min_separation)
    known = chain.known
    keep = known[rows] & known[columns]
    return rows[keep], columns[keep]


@torch.no_grad()
def pair_features(model: Transformer, protein: Protein, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """(pairs, n_layers x n_heads) float32, layer-major: each pair's APC(symmetrised attention) in every map, the
    numbers `predict_contacts` feeds the head. One layer's maps are alive at a time."""
    config = model.config
    ids = torch.from_numpy(protein.ids)[None].to(model.device)
    residues = torch.zeros_like(ids, dtype=torch.bool)
    residues[0, protein.start:protein.start + protein.length] = True
    at_rows = torch.from_numpy(rows + protein.start).to(model.device)
    at_columns = torch.from_numpy(columns + protein.start).to(model.device)
    features = np.empty((len(rows), config.n_layers * config.n_heads), dtype=np.float32)
    for layer, maps in enumerate(contact_features(model, ids, torch.ones_like(ids), residues)):
        features[:, layer * config.n_heads:(layer + 1) * config.n_heads] = maps[0][:, at_rows, at_columns].T.cpu()
        del maps
    return features


def fit_regression(features: np.ndarray, labels: np.ndarray, l1_c: float = DEFAULT_L1_C) -> tuple[np.ndarray, float]:
    """(weight, bias) of the L1 logistic regression of `labels` on `features` (deterministic: liblinear, seed 0)."""
    from sklearn.linear_model import LogisticRegression

    check_labels(labels)
    regression = LogisticRegression(l1_ratio=1.0, C=l1_c, solver="liblinear", random_state=0, max_iter=1000)
    regression.fit(features, labels)
    return regression.coef_[0].astype(np.float32), float(regression.intercept_[0])


def check_labels(labels: np.ndarray, min_separation: int = MIN_SEPARATION) -> None:
    """Refuse examples a regression cannot be fitted on: none at all, or of one class only."""
    if not len(labels):
        raise InputError(f"the structures have no residue pair at separation >= {min_separation} with both residues "
                         f"observed (every chain is shorter than {min_separation + 1} residues or unobserved there): "
                         "nothing to fit on; add longer chains")
    if labels.all() or not labels.any():
        raise InputError(f"the structures' {len(labels)} residue pairs are all "
                         f"{'contacts' if labels.any() else 'non-contacts'}: a regression needs both")


def checked_l1_c(l1_c: float | None) -> float:
    """`l1_c`, DEFAULT_L1_C for None; anything but a finite positive number is refused (sklearn refuses inf only
    once the model has run)."""
    if l1_c is None:
        return DEFAULT_L1_C
    if not 0 < l1_c < math.inf:
        raise ConfigError(parameter("l1_c"), l1_c, allowed="a finite number > 0")
    return l1_c


def fit_contact_head(model: Transformer, tokenizer: Tokenizer, files: list[Path], l1_c: float = DEFAULT_L1_C,
                     stats: FitStats | None = None, progress: bool = False) -> FitStats:
    """Fit the regression on the chains of `files` and attach it to `model` (in place); returns the counts. With
    `progress`, each long step says how far it is on stderr (`biotf.progress`)."""
    l1_c = checked_l1_c(l1_c)
    stats = stats if stats is not None else FitStats()
    found = chain_proteins(files, tokenizer, model.config.max_seq_len, stats.structures, progress)
    pairs = [scored_pairs(chain) for chain, _ in found]
    labels = [chain.contacts()[rows, columns] for (chain, _), (rows, columns) in zip(found, pairs)]
    check_labels(np.concatenate(labels))  # before the model runs
    with reporting(progress, "attention maps", "chains", model, total=len(found)) as shown:
        features = [pair_features(model, protein, rows, columns)
                    for (_, protein), (rows, columns) in counting(list(zip(found, pairs)), shown)]
    with waiting(progress, f"fitting the L1 regression on {counted(sum(map(len, labels)), 'residue pair')}"):
        weight, bias = fit_regression(np.concatenate(features), np.concatenate(labels), l1_c)
    stats.pairs = sum(len(y) for y in labels)
    stats.contacts = int(sum(y.sum() for y in labels))
    stats.weights, stats.nonzero = len(weight), int(np.count_nonzero(weight))
    attach_contact_head(model, torch.from_numpy(weight), bias)
    return stats


def fit_file(model_source: str | Path | LoadedModel | Callable[[], LoadedModel], structures: str | Path,
             output: str | Path, names: list[str] | None = None, listed_in: str | Path = "", l1_c: float | None = None,
             device: str = "cpu", progress: bool = False) -> FitStats:
    """`model_source` (a source, a loaded model or its loader: `as_loaded`) with a contact head fitted on the
    structures of `structures` (all, or `names`), exported to the new directory `output`; every refusal comes before
    the model is loaded or runs. `l1_c` None: DEFAULT_L1_C. With `progress`, each long step says how far it is on
    stderr."""
    check_export_directory(output)
    l1_c = checked_l1_c(l1_c)
    files = structure_files(structures, names, listed_in)
    loaded = as_loaded(model_source, device)
    model, tokenizer = loaded.network, loaded.tokenizer
    if model.stem is not None:
        raise ConfigError(parameter("model"), str(loaded.source),
                          reason="its convolutional stem (model.stem=conv) makes "
                          f"attention run over bins of {model.config.stem_factor} residues, and a contact map needs "
                          "one attention row per residue")
    stats = fit_contact_head(model, tokenizer, files, l1_c, progress=progress)
    save_pretrained(model.cpu(), tokenizer, output)
    return stats
