"""Many ProteinGym assays in one run: one row per assay with ProteinGym's five metrics (`biotf score proteingym`).

Inputs, in ProteinGym's layout:
- a reference file (ProteinGym's `DMS_substitutions.csv`): one row per assay with `DMS_id` and `target_seq` (the
  wild type its mutants are numbered on), optionally `DMS_filename` (the assay's file name) and `start_idx` (the
  number of target_seq's first residue, default 1, as `compute_fitness.py` reads it);
- the assays: a directory or a list of files, each a CSV with `mutant` (`A42G`, `A42G:K50R`), `DMS_score` and
  optionally `DMS_score_bin`. A file belongs to the reference row whose `DMS_filename` it is (`.gz` aside) or whose
  `DMS_id` its name is (`<DMS_id>.csv[.gz]`). A listed file no row names is refused; a directory's other files,
  and the rows without a file, are counted in the summary, never scored silently or in part.
Every variant of an assay is scored (`Scorer.variant_scores`) and the metrics computed on all of them
(`biotf.scoring.fitness_metrics`). Rows: `DMS_id`, `variants`, `multi_mutants`, `method`, `precision`, `windows` (1
where the target fits the model; else the number of `biotf embed` windows it spans) and `window` (how it was read:
`whole`, `centred` for masked-marginal with `ScoreOptions.window="centred"`, ProteinGym's window around each masked position, the default
here, or `owned`: each position in the `biotf embed` window that owns it), `Spearman`,
`AUC`, `MCC`, `NDCG`, `Top_recall`, then for each published column C the user names from a published table (ProteinGym's
`DMS_substitutions_<metric>_DMS_level.csv`: `DMS ID` or `DMS_id`, then one column per model) `C (published)` and
`<metric> - C` (biotf's figure minus the published one; empty where the table lacks the assay).

The run goes through `biotf.data.sharded` with one assay a part, under torchrun or in one process alike: an assay
is kept the moment it is finished, so a killed run, rerun as it was, scores only the assays not yet done.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from biotf.checkpoint.loading import LoadedModel, as_loaded
from biotf.conventions import counted
from biotf.errors import ConfigError, InputError, TokenizationError
from biotf.io.outputs import output_format
from biotf.io.readers import Record, ReaderOptions, read_records, table_columns, with_source
from biotf.io.tables import TABLE_FORMATS, write_table
from biotf.naming import parameter
from biotf.progress import reporting
from biotf.scoring import METHODS
from biotf.scoring.fitness_metrics import METRICS, fitness_metrics
from biotf.scoring.scorer import ScoreOptions, Scorer
from biotf.scoring.variant_files import read_variants
from biotf.tokenizers.base import PolicyStats

REFERENCE_READER = ReaderOptions(format="csv", column="target_seq", id_column="DMS_id")
ASSAY_SUFFIXES = (".csv", ".csv.gz", ".tsv", ".tsv.gz")
PART_ROWS = "assays.jsonl"
PART_RUN = "run.txt"  # the run that scored the part (`_run_of`)
SUMMED = ("assays", "variants", "multi_mutants", "policies")


def _assay_name(path: Path) -> str:
    """`BLAT_ECOLX_Jacquier_2013.csv` for `.../BLAT_ECOLX_Jacquier_2013.csv.gz`."""
    return path.name[:-3] if path.name.endswith(".gz") else path.name


@dataclass
class AssaySet:
    """The assays to score: DMS_id -> file, with what was left aside (counted, for the summary)."""

    reference_file: Path
    files: dict[str, Path]
    rows: int  # assays the reference file lists
    other_files: int = 0  # files of a directory that no reference row names

    def describe(self) -> str:
        missing = self.rows - len(self.files)
        parts = [f"{counted(len(self.files), 'assay')} of the {self.rows} in {self.reference_file}"]
        if missing:
            parts.append(f"{missing} without a file here, not scored")
        if self.other_files:
            parts.append(f"{counted(self.other_files, 'other file')} of the directory not assays of it")
        return "; ".join(parts)


def find_assays(assays: str | Path | Sequence[str | Path], reference_file: str | Path) -> AssaySet:
    """Match assay files (a directory, or a list of files) to the rows of a ProteinGym reference file."""
    reference_file = Path(reference_file)
    names: dict[str, str] = {}
    ids: set[str] = set()
    for record in read_records(reference_file, REFERENCE_READER):
        if record.id in ids:
            raise InputError(f"{reference_file}: DMS_id {record.id!r} is listed twice")
        ids.add(record.id)
        for name in (record.metadata.get("DMS_filename", ""), f"{record.id}.csv", f"{record.id}.tsv"):
            if name:
                names.setdefault(name, record.id)
    single = isinstance(assays, (str, Path))
    directory = Path(assays) if single and Path(assays).is_dir() else None
    if directory is not None:
        given = sorted(p for p in directory.iterdir() if p.is_file() and p.name.endswith(ASSAY_SUFFIXES)
                       and p.resolve() != reference_file.resolve())
    else:
        given = [Path(assays)] if single else [Path(p) for p in assays]
    files: dict[str, Path] = {}
    other = 0
    for path in given:
        if not path.is_file():
            raise InputError(f"assay file {path} does not exist")
        dms_id = names.get(_assay_name(path))
        if dms_id is None:
            if directory is not None:
                other += 1
                continue
            raise InputError(f"assay file {path}: no row of {reference_file} names it (DMS_filename "
                             f"{_assay_name(path)!r} or DMS_id {_assay_name(path).rsplit('.', 1)[0]!r})")
        if dms_id in files:
            raise InputError(f"assay {dms_id}: two files, {files[dms_id]} and {path}")
        files[dms_id] = path
    if not files:
        raise InputError(f"no assay of {reference_file} among {directory or ', '.join(map(str, given))}")
    return AssaySet(reference_file, files, len(ids), other)


@dataclass(frozen=True)
class PublishedTable:
    """Columns of a published per-assay table set beside biotf's figure of `metric`."""

    path: Path
    columns: tuple[str, ...]
    metric: str = "Spearman"

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ConfigError(parameter("reference_metric"), self.metric, allowed=", ".join(METRICS))
        if not self.columns:
            raise ConfigError(parameter("published"), None, reason=f"name the columns of {self.path} to set beside "
                              "biotf's", required_with=parameter("reference_table"))
        names = table_columns(self.path, ReaderOptions())
        missing = [c for c in self.columns if c not in names]
        if missing:
            raise ConfigError(parameter("published"), ", ".join(missing), reason=f"{self.path} has no such column",
                              allowed=", ".join(n for n in names if n not in ("DMS ID", "DMS_id")))
        if self._id_column(names) is None:
            raise InputError(f"{self.path}: no 'DMS ID' or 'DMS_id' column naming the assays")

    @staticmethod
    def _id_column(names: Sequence[str]) -> str | None:
        return next((name for name in ("DMS ID", "DMS_id") if name in names), None)

    def values(self) -> dict[str, dict[str, float]]:
        """DMS_id -> {column: published value (NaN where empty)}."""
        column = self._id_column(table_columns(self.path, ReaderOptions()))
        table = {}
        for record in read_records(self.path, ReaderOptions(column=column, id_column=column)):
            table[record.id] = {name: _number(record.metadata[name], self.path, record.id, name)
                                for name in self.columns}
        return table

    def beside(self, rows: list[dict[str, Any]]) -> int:
        """Add `C (published)` and `<metric> - C` to each row; returns how many assays the table lacks."""
        table = self.values()
        for row in rows:
            published = table.get(row["DMS_id"], {})
            for name in self.columns:
                value = published.get(name, math.nan)
                row[f"{name} (published)"] = value
                row[f"{self.metric} - {name}"] = row[self.metric] - value
        return sum(row["DMS_id"] not in table for row in rows)


def _number(text: str, path: Path, dms_id: str, column: str) -> float:
    if not text.strip():
        return math.nan
    try:
        return float(text)
    except ValueError:
        raise InputError(f"{path}: {dms_id}, column {column!r}: {text!r} is not a number") from None


def assay_row(scorer: Scorer, method: str, record: Record, path: Path, progress: bool = False) -> dict[str, Any]:
    """The row of one assay (reference row `record`, file `path`): every variant scored by `method`, the metrics
    over all of them."""
    target = record.sequence.upper()  # compute_fitness.py upper-cases target_seq too
    start = record.metadata.get("start_idx", "").strip() or "1"
    try:
        offset = int(float(start))
    except ValueError:
        raise InputError(f"{record.id}: start_idx {start!r} is not an integer") from None
    scorer.check_reference(target, record.id)  # a refusal names the DMS_id
    try:
        pairs = read_variants(path, target, offset, ReaderOptions(), "mutant" if "mutant" in
                              table_columns(path, ReaderOptions()) else None, scorer.policies)
    except TokenizationError as error:
        raise with_source(error, path) from None
    if not pairs or "DMS_score" not in pairs[0][0].metadata:
        raise InputError(f"assay file {path}: " + ("no variants" if not pairs else "no DMS_score column") +
                         " (ProteinGym's layout: mutant, DMS_score and DMS_score_bin columns)")
    variants = [variant for _, variant in pairs]
    resolved = scorer.resolve(method, variants, target)
    with reporting(progress, f"scoring {record.id}", "pos", scorer.model) as bar:
        scores = [s.score for s in scorer.variant_scores(target, variants, resolved, progress=bar)]
    metadata = [r.metadata for r, _ in pairs]
    bins = [m["DMS_score_bin"] for m in metadata] if "DMS_score_bin" in metadata[0] else None
    metrics = fitness_metrics(scores, [m["DMS_score"] for m in metadata], bins, assay=f"{record.id} ({path})")
    multi_mutants = sum(len(variant.mutations) > 1 for variant in variants)
    return {"DMS_id": record.id, "variants": len(variants), "multi_mutants": multi_mutants, "method": resolved,
            "precision": scorer.precision, **_windows(scorer, resolved, target), **metrics}


def _windows(scorer: Scorer, method: str, target: str) -> dict[str, Any]:
    """`windows` and `window` of an assay's row (the module docstring)."""
    count = scorer.window_count(target)
    centred = method == "masked-marginal" and scorer.options.window == "centred"
    return {"windows": count, "window": "whole" if count == 1 else "centred" if centred else "owned"}


@dataclass
class AssaySummary:
    """What a run over assays did, and each assay's metrics, for the summary lines."""

    assays: AssaySet | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    published: PublishedTable | None = None
    not_published: int = 0
    kept: int = 0  # assays finished by an earlier, interrupted run of the same command
    policies: PolicyStats = field(default_factory=PolicyStats)

    def lines(self) -> list[str]:
        lines = []
        for row in self.rows:
            metrics = ", ".join(f"{name} {row[name]:.3f}" for name in METRICS)
            windows = "" if row["windows"] == 1 else f", target longer than the model: {row['window']} windows"
            line = f"{row['DMS_id']}: {counted(row['variants'], 'variant')} ({row['multi_mutants']} multi-mutants" \
                   f"{windows}) by {row['method']}: {metrics}"
            for name in self.published.columns if self.published else ():
                line += f"; {name} published {row[f'{name} (published)']:.3f}"
            lines.append(line)
        return lines

    def summary(self) -> str:
        scored = self.assays.describe() if self.assays else counted(len(self.rows), "assay")
        published = ""
        if self.published is not None:
            published = f"; published {self.published.metric} from {self.published.path}"
            if self.not_published:
                published += f" ({counted(self.not_published, 'assay')} not in it)"
        kept = f" ({self.kept} kept from an interrupted run)" if self.kept else ""
        return f"{scored}{kept}{published}; tokenizer policies: {self.policies.summary()}"


class AssayRun:
    """One model over a set of assays (`biotf.data.sharded.PartWork`, one assay a part); see the module docstring."""

    def __init__(self, model: str | Path | LoadedModel, assays: AssaySet, output_path: str | Path,
                 method: str = "auto", options: ScoreOptions = ScoreOptions(), published: PublishedTable | None = None,
                 device: str | None = None, progress: bool = False,
                 tokenizer_options: Mapping[str, Any] | None = None, summary: AssaySummary | None = None):
        output_format(output_path, TABLE_FORMATS)
        loaded = as_loaded(model, device, tokenizer_options)
        self.tokenizer_options = loaded.tokenizer_options
        self.scorer = Scorer.of(loaded, options)
        if method not in METHODS:
            raise ConfigError("method", method, allowed=", ".join(METHODS))
        self.method, self.assays, self.published, self.progress = method, assays, published, progress
        self.done = summary if summary is not None else AssaySummary()
        self.done.assays, self.done.published = assays, published

    def rows(self, records: Iterable[Record]) -> Iterator[dict[str, Any]]:
        """The row of each given assay among `records` (rows of the reference file), in order."""
        for record in records:
            if record.id in self.assays.files:
                yield assay_row(self.scorer, self.method, record, self.assays.files[record.id], self.progress)

    # --- biotf.data.sharded.PartWork -----------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        from biotf.checkpoint.digest import model_fingerprint
        from biotf.untrusted import file_crc32

        return {"command": "score proteingym", "model_fingerprint": model_fingerprint(self.scorer.model),
                "tokenizer_fingerprint": self.scorer.tokenizer.fingerprint, "tokenizer_options": self.tokenizer_options,
                "method": self.method, "max_length": self.scorer.max_length, "overlap": self.scorer.options.overlap,
                "packing": self.scorer.options.packing, "window": self.scorer.options.window,
                "assays": {dms_id: [path.stat().st_size, file_crc32(path)]
                           for dms_id, path in sorted(self.assays.files.items())}}

    def write_part(self, records: Iterator[Record], directory: Path) -> dict[str, Any]:
        self.scorer.policies = PolicyStats()
        rows = list(self.rows(records))
        with open(directory / PART_ROWS, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(row) + "\n" for row in rows)
        (directory / PART_RUN).write_text(_run_of(directory.parent), encoding="utf-8")
        return {"assays": len(rows), "variants": sum(r["variants"] for r in rows),
                "multi_mutants": sum(r["multi_mutants"] for r in rows), "policies": dict(self.scorer.policies)}

    def merge(self, parts: list[Path], output: Path, counts: dict[str, Any]) -> None:
        rows = []
        now = _run_of(output.parent / f"{output.name}.parts")
        for part in parts:
            with open(part / PART_ROWS, encoding="utf-8") as handle:
                found = [json.loads(line) for line in handle]
            rows.extend(found)
            self.done.kept += len(found) * ((part / PART_RUN).read_text(encoding="utf-8") != now)
        if self.published is not None:
            self.done.not_published = self.published.beside(rows)
        self.done.rows = rows
        self.done.policies = PolicyStats(counts.get("policies", {}))
        write_table(output, rows)


def _run_of(folder: Path) -> str:
    """The nonce of the run that holds the parts folder now (its manifest's `run`): a part written under another
    one was kept from an interrupted run."""
    from biotf.data.sharded import MANIFEST
    from biotf.untrusted import read_json_object

    return str(read_json_object(folder / MANIFEST, "parts manifest")["run"])


def score_assays(model: str | Path | LoadedModel, assays: str | Path | Sequence[str | Path],
                 reference_file: str | Path, output_path: str | Path, method: str = "auto",
                 options: ScoreOptions = ScoreOptions(window="centred"), published: PublishedTable | None = None,
                 device: str | None = None, progress: bool = False, overwrite: bool = False,
                 tokenizer_options: Mapping[str, Any] | None = None, launch: Any = None) -> AssaySummary | None:
    """Score `assays` into the table `output_path` (one row per assay, in the order of the reference file),
    resumable: `<output>.parts/` keeps each finished assay until the table is written. `launch`: this process's
    `biotf.data.sharded.Launch` under torchrun (None: one process); ranks other than 0 return None."""
    from biotf.data.sharded import Launch, run_parts

    found = find_assays(assays, reference_file)
    run = AssayRun(model, found, output_path, method, options, published, device, progress, tokenizer_options)
    done = run_parts(run, found.reference_file, output_path, launch or Launch(0, 1, 0), REFERENCE_READER, 1,
                     overwrite)
    return None if done is None else run.done


def assay_table(model: LoadedModel, assays: str | Path | Sequence[str | Path], reference_file: str | Path,
                method: str = "auto", options: ScoreOptions = ScoreOptions(window="centred"),
                published: PublishedTable | None = None, summary: AssaySummary | None = None) -> list[dict[str, Any]]:
    """The rows `score_assays` writes, in memory (no parts, no resume), what `summary` they make filled in: what
    `biotf.Model.score_assays` returns."""
    found = find_assays(assays, reference_file)
    run = AssayRun(model, found, "table.csv", method, options, published, summary=summary)
    rows = list(run.rows(read_records(found.reference_file, REFERENCE_READER)))
    if published is not None:
        run.done.not_published = published.beside(rows)
    run.done.rows, run.done.policies = rows, run.scorer.policies
    return rows
