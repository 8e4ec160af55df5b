"""The MOSES metrics of a file of generated SMILES against reference files, as rows for a TSV / JSON file.

    evaluation = evaluate_file("samples.csv", ReaderOptions(column="sequence"),
                               {"Test": "moses_test.csv.gz", "TestSF": "moses_test_scaffolds.csv.gz"},
                               train="moses_train.csv.gz", reference_options=ReaderOptions(column="SMILES"))

As MOSES's `get_all_metrics`: validity counts every row (an empty one is invalid); unique@k, IntDiv, Filters, SNN,
Frag, Scaf and FCD are over the valid molecules, duplicates included; novelty over the distinct valid ones. Each
distinct molecule's fingerprint, fragments, scaffold, filters and ChemNet activations are computed once and
counted as often as it occurs. Nothing is left out unsaid: the counts (rows, invalid, empty, duplicates) are rows
of the output, and a metric over fewer molecules than its name says (unique@10k of 3,000) carries a note.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from biotf.io.atomic import atomic_write_text
from biotf.io.outputs import output_format
from biotf.io.readers import ReaderOptions
from biotf.io.tables import write_rows
from biotf.errors import ConfigError, InputError
from biotf_recipes.moses import chemnet, metrics
from biotf_recipes.moses.filters import passes_filters
from biotf_recipes.moses.reference import (DEFAULT_CACHE_DIR, Loaded, SmilesFile, check_reference_file, gaussian,
                                             load_reference, read_smiles)
from biotf.progress import counting, reporting
from biotf.tokenizers.base import PolicyStats
from biotf.conventions import counted
from biotf.naming import parameter

UNIQUE_AT = (1000, 10000)
COUNTS = ("rows", "invalid", "duplicates")  # rows that are counts of molecules, not metrics
COLUMNS = ("metric", "value", "molecules", "note")
METRIC_FORMATS = (".tsv", ".json")


@dataclass(frozen=True)
class MetricRow:
    """One metric: its value (NaN when it cannot be computed), the molecules it is over, and what to know."""

    metric: str
    value: float
    molecules: int
    note: str = ""


@dataclass
class Evaluation:
    rows: list[MetricRow]
    references: dict[str, Loaded] = field(default_factory=dict)
    input_policies: PolicyStats = field(default_factory=PolicyStats)

    def value(self, metric: str) -> float:
        return next(row.value for row in self.rows if row.metric == metric)


def _label(k: int) -> str:
    return f"unique@{k // 1000}k" if k % 1000 == 0 else f"unique@{k}"


def check_generated(generated: SmilesFile) -> None:
    """Refuse a generated set with no valid molecule in one line: there is nothing to measure."""
    if not generated.valid:
        raise InputError(f"{generated.path}: no valid molecule among {counted(len(generated.rows), 'row')} "
                         "(RDKit parses none)")


def evaluate_generated(generated: SmilesFile, tests: dict[str, Loaded], train: Loaded | None = None,
                       batch_size: int = 1024, device: str = "cpu", progress: bool = False) -> list[MetricRow]:
    """The metric rows of a parsed generated set against loaded reference statistics (`tests`: name -> test
    statistics, e.g. {"Test": ..., "TestSF": ...}); with `progress`, the filters' and ChemNet's molecules done on
    stderr."""
    total = len(generated.rows)
    canonical = generated.valid
    valid = len(canonical)
    empty = sum(not row for row in generated.rows)
    rows = [MetricRow("rows", total, total), MetricRow("invalid", total - valid, total,
                                                       f"{empty} empty" if empty else ""),
            MetricRow("validity", valid / total, total)]
    check_generated(generated)
    distinct, inverse = np.unique(np.array(canonical, dtype=object), return_inverse=True)
    rows.append(MetricRow("duplicates", valid - len(distinct), valid, "valid molecules that repeat an earlier one"))
    for k in UNIQUE_AT:
        note = f"only {valid} valid molecules, fewer than {k}: over all of them" if valid < k else ""
        rows.append(MetricRow(_label(k), metrics.unique_at(canonical, k), min(k, valid), note))
    first = {}
    for smiles, molecule in zip(generated.canonical, generated.molecules):
        if smiles is not None:
            first.setdefault(smiles, molecule)
    molecules = [first[smiles] for smiles in distinct]
    multiplicity = np.bincount(inverse, minlength=len(distinct))
    fingerprints = metrics.fingerprints(molecules)[inverse]
    if train is not None:
        rows.append(MetricRow("novelty", metrics.novelty(distinct, train.statistics.hashes), len(distinct),
                              "distinct valid molecules not in the training set"))
    rows.append(MetricRow("IntDiv1", metrics.internal_diversity(fingerprints, 1), valid))
    rows.append(MetricRow("IntDiv2", metrics.internal_diversity(fingerprints, 2), valid))
    with reporting(progress, f"filters of {generated.path.name}", "molecules", total=len(molecules)) as shown:
        passes = np.array([passes_filters(molecule) for molecule in counting(molecules, shown)])
    rows.append(MetricRow("filters", float((passes * multiplicity).sum() / valid), valid, "MCF, PAINS, atoms, "
                                                                                         "charge, rings"))
    fragments, scaffolds = Counter(), Counter()
    for molecule, count in zip(molecules, multiplicity):
        fragments.update({piece: n * int(count) for piece, n in Counter(metrics.fragments(molecule)).items()})
        core = metrics.scaffold(molecule)
        if core is not None:
            scaffolds[core] += int(count)
    fcd = None
    if tests and valid >= 2:
        with reporting(progress, f"ChemNet activations of {generated.path.name}", "molecules",
                       total=len(distinct)) as shown:
            fcd = gaussian(chemnet.activations(list(distinct), batch_size, device, shown)[inverse])
    for name, loaded in tests.items():
        reference = loaded.statistics
        rows.append(MetricRow(f"FCD/{name}", chemnet.frechet_distance(*fcd, reference.fcd_mean, reference.fcd_cov)
                              if fcd else math.nan, valid, "" if fcd else "needs 2 valid molecules"))
        rows.append(MetricRow(f"SNN/{name}", metrics.nearest_neighbour_similarity(reference.fingerprints,
                                                                                  fingerprints), valid))
        rows.append(MetricRow(f"Frag/{name}", metrics.cosine_similarity(reference.fragments, fragments), valid))
        rows.append(MetricRow(f"Scaf/{name}", metrics.cosine_similarity(reference.scaffolds, scaffolds), valid,
                              "" if scaffolds else "no scaffold with 2 rings among the generated molecules"))
    return rows


def evaluate_file(path: str | Path, options: ReaderOptions, tests: dict[str, str | Path],
                  train: str | Path | None = None, reference_options: ReaderOptions = ReaderOptions(),
                  cache_dir: str | Path = DEFAULT_CACHE_DIR, batch_size: int = 1024,
                  device: str = "cpu", progress: bool = False) -> Evaluation:
    """Read the generated set (empty rows kept: they are invalid samples), load or compute each reference's
    statistics (cached, `reference.load_reference`), and compute the metrics; with `progress`, how far each long
    step has come on stderr. A generated set with no valid molecule and a missing reference file are refused
    before any reference's statistics are computed."""
    generated = read_smiles(path, replace(options, keep_empty=True), progress=progress)
    check_generated(generated)
    for file in [*tests.values(), *([train] if train is not None else [])]:
        check_reference_file(file)
    loaded = {name: load_reference(file, "test", reference_options, cache_dir, batch_size, device, progress)
              for name, file in tests.items()}
    if train is not None:
        loaded["train"] = load_reference(train, "train", reference_options, cache_dir, progress=progress)
    rows = evaluate_generated(generated, {name: item for name, item in loaded.items() if name != "train"},
                              loaded.get("train"), batch_size, device, progress)
    return Evaluation(rows, loaded, generated.policies)


def write_metrics(path: str | Path, evaluation: Evaluation) -> Path:
    """The metric rows as TSV (metric, value, molecules, note) or JSON, by extension, all or nothing."""
    if output_format(path, METRIC_FORMATS, parameter("output")) == ".tsv":
        return write_rows(path, COLUMNS, metric_rows(evaluation))
    document = {"metrics": {row.metric: None if math.isnan(row.value) else row.value for row in evaluation.rows},
                "molecules": {row.metric: row.molecules for row in evaluation.rows},
                "notes": {row.metric: row.note for row in evaluation.rows if row.note},
                "references": {name: {"cache": str(item.path), "rows": item.statistics.rows,
                                      "valid": item.statistics.molecules}
                               for name, item in evaluation.references.items()},
                "input_policies": dict(evaluation.input_policies)}
    return atomic_write_text(path, json.dumps(document, indent=2) + "\n")


def metric_rows(evaluation: Evaluation) -> list[tuple[str, str, str, str]]:
    """The metric rows as the table's fields (metric, value, molecules, note): the .tsv and the printed table."""
    return [(row.metric, format_value(row), str(row.molecules), row.note) for row in evaluation.rows]


def metric_table(evaluation: Evaluation) -> str:
    """The metric rows as tab-separated lines under their header, as `biotf generate evaluate` prints them."""
    return "\n".join("\t".join(fields) for fields in [COLUMNS, *metric_rows(evaluation)])


def reference_lines(evaluation: Evaluation) -> list[str]:
    """One line per reference set: its molecules, the invalid rows left out, and where its statistics came from."""
    lines = []
    for name, loaded in evaluation.references.items():
        how = (f"read from {loaded.path}" if loaded.how == "cache" else
               f"computed in {loaded.seconds:.1f} s and cached in {loaded.path}"
               + (f" (the entry there was not used: {loaded.replaced})" if loaded.replaced else ""))
        left_out = loaded.statistics.rows - loaded.statistics.molecules
        invalid = f"; {counted(left_out, 'invalid row')} left out" if left_out else ""
        lines.append(f"reference {name}: {counted(loaded.statistics.molecules, 'molecule')}{invalid}, statistics {how}")
    return lines


def checked_cache_dir(cache_dir: str | Path | None) -> Path:
    """--cache-dir (default `DEFAULT_CACHE_DIR`), refused in one line where it, or a folder above it, is a file."""
    cache_dir = Path(cache_dir or DEFAULT_CACHE_DIR)
    blocking = next((path for path in (cache_dir, *cache_dir.parents) if path.exists()), None)
    if blocking is not None and not blocking.is_dir():
        raise ConfigError(parameter("cache_dir"), str(cache_dir), reason=f"{blocking} is a file, not a directory",
                          allowed="a directory, made if missing")
    return cache_dir


def format_value(row: MetricRow) -> str:
    """A count as an integer, a metric with 4 decimals (MOSES's tables give 3 to 4), NaN as "nan"."""
    if math.isnan(row.value):
        return "nan"
    return str(int(row.value)) if row.metric in COUNTS else f"{row.value:.4f}"
