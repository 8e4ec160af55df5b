"""Contact precision on real structures (`biotf contacts evaluate`), as the ESM papers report it.

    rows = evaluate_structures("with_contacts/", "structures/", names=["1eteA", ...])

Per chain of length L (the sequence the model reads, missing residues included) and per separation range (short
6-11, medium 12-23, long >= 24): the pairs i < j of that range whose residues both have coordinates are ranked by
the predicted probability, and P@L, P@L/2, P@L/5 is the fraction of true contacts among the top L, L // 2, L // 5
(at least 1). A range with fewer scorable pairs than k counts the shortfall as misses (ESM's `compute_precisions`
pads the same way), so a precision never rises because pairs were unobserved. The mean rows average the chains.

The baseline `separation prior` uses no model: pairs ranked by sequence separation, closest first (ties in
sequence order) -- the contact frequency falls with separation, so this is what any model must beat.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from biotf.analysis.plot import picture_paths, plot_contacts
from biotf.io.tables import write_rows
from biotf.checkpoint.loading import LoadedModel, as_loaded
from biotf.progress import reporting
from biotf.structure.chains import Chain, structure_files
from biotf.structure.contact_files import check_contact_head, contact_maps
from biotf.structure.fit import StructureStats, chain_proteins, scored_pairs

RANGES = {"short": (6, 11), "medium": (12, 23), "long": (24, None)}
TOPS = {"P@L": 1, "P@L/2": 2, "P@L/5": 5}
MODEL, PRIOR = "model", "separation prior"
COLUMNS = ("chain", "length", "predictor", "range", *TOPS)


@dataclass(frozen=True)
class Precision:
    """One row of the table: a chain (or `mean`), a predictor, a range and its precision at every top."""

    chain: str
    length: int
    predictor: str
    range: str
    values: tuple[float, ...]

    def fields(self) -> list[str]:
        return [self.chain, str(self.length), self.predictor, self.range, *(f"{value:.4f}" for value in self.values)]


@dataclass
class Evaluation:
    """Every chain's rows, then the mean rows, and what was read."""

    rows: list[Precision] = field(default_factory=list)
    structures: StructureStats = field(default_factory=StructureStats)

    def means(self) -> list[Precision]:
        return [row for row in self.rows if row.chain == "mean"]

    def means_table(self) -> str:
        """The mean rows as `biotf contacts evaluate` prints them, tab-separated under a header: a row's `chains` is
        the number of chains it is the mean of."""
        return "".join("\t".join(fields) + "\n" for fields in [("chains", *COLUMNS[2:]),
                                                               *(row.fields()[1:] for row in self.means())])


def precisions(scores: np.ndarray, chain: Chain) -> dict[str, tuple[float, ...]]:
    """Range -> precision at each of TOPS, of `scores` (L, L; higher = more likely in contact) against `chain`."""
    length = len(chain.sequence)
    rows, columns = scored_pairs(chain, RANGES["short"][0])
    separation = columns - rows
    truth = chain.contacts()[rows, columns]
    found: dict[str, tuple[float, ...]] = {}
    for name, (low, high) in RANGES.items():
        band = (separation >= low) & (separation <= (high if high is not None else length))
        ranked = truth[band][np.argsort(-scores[rows[band], columns[band]], kind="stable")]
        found[name] = tuple(float(ranked[:k].sum()) / k for k in (max(1, length // n) for n in TOPS.values()))
    return found


def separation_prior(length: int) -> np.ndarray:
    """(L, L) scores that rank pairs by closeness in sequence."""
    positions = np.arange(length)
    return -np.abs(positions[:, None] - positions[None]).astype(np.float64)


def _chain_rows(chain: Chain, predictor: str, scores: np.ndarray) -> Iterator[Precision]:
    for name, values in precisions(scores, chain).items():
        yield Precision(chain.name, len(chain.sequence), predictor, name, values)


def evaluate_structures(model_source: str | Path | LoadedModel | Callable[[], LoadedModel], structures: str | Path,
                        names: list[str] | None = None,
                        listed_in: str | Path = "", device: str = "cpu", plot: str | Path | None = None,
                        overwrite: bool = False, progress: bool = False) -> Evaluation:
    """The table of the module docstring for the model's contact head and the prior; one chain's map at a time.
    With `plot` (a directory), each chain's predicted and true maps are drawn into `<chain>.png` there (an existing
    picture replaced only with `overwrite`, checked before the model runs). `model_source`: a source, a loaded
    model or its loader (`as_loaded`), loaded after the structures are found. With `progress`, the structures read
    and the residues mapped say how far they are on stderr (`biotf.progress`)."""
    files = structure_files(structures, names, listed_in)
    loaded = as_loaded(model_source, device)
    model, tokenizer = loaded.network, loaded.tokenizer
    check_contact_head(model, loaded.source)
    evaluation = Evaluation()
    found = chain_proteins(files, tokenizer, model.config.max_seq_len, evaluation.structures, progress)
    pictures = picture_paths(plot, [chain.name for chain, _ in found], files, overwrite) if plot is not None else None
    pad_id = tokenizer.pad_id if tokenizer.pad_id is not None else 0  # padded positions are masked anyway
    with reporting(progress, f"contacts {Path(structures).name}", "residues", model,
                   sum(protein.length for _, protein in found)) as shown:
        maps = contact_maps(model, [protein for _, protein in found], pad_id, progress=shown)
        for number, ((chain, _), (_, probabilities)) in enumerate(zip(found, maps)):
            rows = list(_chain_rows(chain, MODEL, probabilities))
            evaluation.rows.extend(rows)
            evaluation.rows.extend(_chain_rows(chain, PRIOR, separation_prior(len(chain.sequence))))
            if pictures is not None:
                long_range = next(row for row in rows if row.range == "long").values[list(TOPS).index("P@L/5")]
                plot_contacts(pictures[number], chain.name, probabilities, chain.drawn_contacts(),
                              f"long-range P@L/5 {long_range:.2f}")
    for predictor in dict.fromkeys(row.predictor for row in evaluation.rows):
        for name in RANGES:
            chosen = [row for row in evaluation.rows if row.predictor == predictor and row.range == name]
            values = tuple(float(np.mean([row.values[k] for row in chosen])) for k in range(len(TOPS)))
            evaluation.rows.append(Precision("mean", len(chosen), predictor, name, values))
    return evaluation


def write_metrics(path: str | Path, rows: list[Precision]) -> None:
    """The table as TSV (COLUMNS; a mean row's length is its number of chains), all or nothing."""
    write_rows(path, COLUMNS, (row.fields() for row in rows))
