"""`score_file` and `score_variants_file`: one input file in, one table out — what `biotf score` runs.

Output: one row per input record, in input order, as .csv, .tsv or .parquet (written under a temporary name
and renamed, so the output name holds a complete file or nothing). Columns: `id`, the scores, then the
record's metadata exactly as read (FASTA descriptions, every other CSV column), as the embedding files do.
- sequences: `sequence`, `method`, `precision` (what the model computed in: fp32, bf16, int8), `log_likelihood`,
  `mean_per_token`, `mean_per_residue`, `perplexity`, `tokens`, `scored_tokens`, `residues`, `windows` (nats; means
  and perplexity over scored tokens);
- variants: `variant` (the mutations, numbered from `offset`), `mutations`, `method`, `precision`, `score`, and with
  both strands `score_forward` and `score_reverse` (`score` is their mean).
Under torchrun `ScoreRun` scores the records in parts (`biotf.data.sharded`) and rank 0 writes the table from them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

from biotf.checkpoint.loading import LoadedModel, as_loaded, model_identity
from biotf.io.outputs import output_format
from biotf.io.readers import Record, ReaderOptions, read_records, with_source
from biotf.io.tables import TABLE_FORMATS, write_table
from biotf.errors import InputError, TokenizationError
from biotf.progress import reporting
from biotf.scoring.scorer import ScoreOptions, Scorer
from biotf.scoring.variant_files import Reference, read_reference, read_variants
from biotf.tokenizers.base import PolicyStats
from biotf.conventions import counted

RECORDS_PER_CALL = 256  # sequences scored together: their rows share batches
PART_ROWS = "rows.jsonl"  # a sharded run's part: its rows, one JSON object a line
SUMMED = ("records", "tokens", "windows", "chunked", "policies")  # what a part counts


@dataclass
class ScoreSummary:
    """What a run did, for its summary line."""

    method: str = ""
    records: int = 0
    tokens: int = 0
    windows: int = 0
    chunked: int = 0
    reference: Reference | None = None
    policies: PolicyStats = field(default_factory=PolicyStats)
    packing: bool = False
    metrics: str = ""  # ProteinGym's metrics of scored variants with its DMS_score column (`assay_metrics`)

    def summary(self) -> str:
        windows = (f", {counted(self.tokens, 'token')} in {counted(self.windows, 'window')} "
                   f"({counted(self.chunked, 'record')} chunked)") if self.windows else ""
        reference = f"; reference: {self.reference.describe()}" if self.reference is not None else ""
        packed = " (packed rows)" if self.packing else ""
        metrics = f"; {self.metrics}" if self.metrics else ""
        return (f"{counted(self.records, 'record')} scored by {self.method}{packed}{windows}{reference}{metrics}; "
                f"tokenizer policies: {self.policies.summary()}")


def _with_metadata(record: Record, columns: dict[str, object]) -> dict[str, object]:
    for name, value in record.metadata.items():
        if name in columns:
            raise InputError(f"record {record.id!r}: input column {name!r} has the name of an output column "
                             f"(output columns: {', '.join(columns)}); rename it")
        columns[name] = value
    return columns


def sequence_rows(scorer: Scorer, method: str, records: Iterable[Record], summary: ScoreSummary, progress=None,
                  source: str | Path | None = None) -> list[dict[str, object]]:
    """One row per record (the module docstring's columns), in order, RECORDS_PER_CALL records sharing batches;
    counts into `summary` (its tokenizer policies too). `source` names the file in a tokenizer error; `progress` (a
    `biotf.progress.Progress` or None) advances by the positions scored."""
    scorer.policies = PolicyStats()
    rows = []
    records = iter(records)
    while chunk := list(islice(records, RECORDS_PER_CALL)):
        try:
            scores = scorer.sequence_scores([r.sequence for r in chunk], method, [r.id for r in chunk], progress)
        except TokenizationError as error:
            raise (with_source(error, source) if source is not None else error) from None
        for record, score in zip(chunk, scores):
            summary.records += 1
            summary.tokens += score.tokens
            summary.windows += score.windows
            summary.chunked += score.windows > 1
            rows.append(_with_metadata(record, {
                "id": record.id, "sequence": record.sequence, "method": method, "precision": scorer.precision,
                "log_likelihood": score.log_likelihood, "mean_per_token": score.mean_per_token,
                "mean_per_residue": score.mean_per_residue, "perplexity": score.perplexity,
                "tokens": score.tokens, "scored_tokens": score.scored_tokens, "residues": score.residues,
                "windows": score.windows}))
    summary.policies.update(scorer.policies)
    return rows


class ScoreRun:
    """One model scoring the records of a file: the whole table (`score_file`), or the parts of a sharded run and
    their merge (`biotf.data.sharded.PartWork`: a part's rows are JSON lines, whose floats read back exactly)."""

    def __init__(self, model: str | Path | LoadedModel, input_path: str | Path, output_path: str | Path,
                 method: str = "auto", options: ScoreOptions = ScoreOptions(), device: str | None = None,
                 progress: bool = False, tokenizer_options: Mapping[str, Any] | None = None):
        output_format(output_path, TABLE_FORMATS)
        self.input_path, self.output_path, self.progress = input_path, output_path, progress
        self.loaded = loaded = as_loaded(model, device, tokenizer_options)
        self.tokenizer_options = loaded.tokenizer_options
        self.scorer = Scorer.of(loaded, options)
        self.method = self.scorer.resolve(method)

    def rows(self, records: Iterable[Record], summary: ScoreSummary) -> list[dict[str, object]]:
        """One row per record, in order (`sequence_rows`), with progress on stderr if asked for (`biotf.progress`)."""
        with reporting(self.progress, f"scoring {Path(self.input_path).name}", "pos", self.scorer.model) as shown:
            return sequence_rows(self.scorer, self.method, records, summary, shown, self.input_path)

    # --- biotf.data.sharded.PartWork -----------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        return {"command": "score", **model_identity(self.scorer.model, self.loaded),
                "tokenizer_fingerprint": self.scorer.tokenizer.fingerprint, "tokenizer_options": self.tokenizer_options,
                "method": self.method, "max_length": self.scorer.max_length, "overlap": self.scorer.options.overlap,
                "packing": self.scorer.options.packing}

    def write_part(self, records: Iterator[Record], directory: Path) -> dict[str, Any]:
        summary = ScoreSummary(method=self.method, packing=self.scorer.options.packing)
        rows = self.rows(records, summary)
        with open(directory / PART_ROWS, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        return {key: getattr(summary, key) for key in SUMMED}

    def merge(self, parts: list[Path], output: Path, counts: dict[str, Any]) -> None:
        rows = []
        for part in parts:
            with open(part / PART_ROWS, encoding="utf-8") as handle:
                rows.extend(json.loads(line) for line in handle)
        write_table(output, rows)

    def summary(self, counts: Mapping[str, Any]) -> ScoreSummary:
        """The summary of counts summed over a sharded run's parts."""
        return ScoreSummary(method=self.method, packing=self.scorer.options.packing,
                            **{**counts, "policies": PolicyStats(counts.get("policies", {}))})


def score_file(model: str | Path | LoadedModel, input_path: str | Path, output_path: str | Path, method: str = "auto",
               options: ScoreOptions = ScoreOptions(), reader_options: ReaderOptions = ReaderOptions(),
               device: str | None = None, progress: bool = False,
               tokenizer_options: Mapping[str, Any] | None = None) -> ScoreSummary:
    """The (pseudo-)log-likelihood of every record of `input_path`, into `output_path`; `tokenizer_options` change
    policies of the model's tokenizer (`as_loaded`)."""
    run = ScoreRun(model, input_path, output_path, method, options, device, progress, tokenizer_options)
    summary = ScoreSummary(method=run.method, packing=options.packing)
    rows = run.rows(read_records(input_path, reader_options, summary.policies), summary)
    write_table(output_path, rows)
    return summary


def score_variants_file(model: str | Path | LoadedModel, variants_path: str | Path, reference: str,
                        output_path: str | Path, method: str = "auto", offset: int = 1, both_strands: bool = False,
                        options: ScoreOptions = ScoreOptions(), reader_options: ReaderOptions = ReaderOptions(),
                        mutation_column: str | None = None, device: str | None = None, progress: bool = False,
                        tokenizer_options: Mapping[str, Any] | None = None) -> ScoreSummary:
    """A score per variant of `variants_path` against `reference` (a one-record file or a sequence: see
    `read_reference`); an error about the reference names its file, one about a variant the variants file;
    `tokenizer_options` change policies of the model's tokenizer (`as_loaded`)."""
    output_format(output_path, TABLE_FORMATS)
    summary = ScoreSummary(packing=options.packing)
    summary.reference = read_reference(reference, summary.policies)
    reference_sequence = summary.reference.sequence
    pairs = read_variants(variants_path, reference_sequence, offset, reader_options, mutation_column, summary.policies)
    loaded = as_loaded(model, device, tokenizer_options)
    scorer = Scorer.of(loaded, options)
    try:
        scorer.check_reference(reference_sequence, summary.reference.name, both_strands)
    except TokenizationError as error:
        if summary.reference.path is None:
            raise
        raise with_source(error, summary.reference.path) from None
    variants = [variant for _, variant in pairs]
    summary.method = scorer.resolve(method, variants, reference_sequence)
    try:
        with reporting(progress, f"scoring {Path(variants_path).name}", "pos", scorer.model) as bar:
            scores = scorer.variant_scores(reference_sequence, variants, summary.method, both_strands, bar)
    except TokenizationError as error:
        raise with_source(error, variants_path) from None
    rows = []
    for (record, variant), score in zip(pairs, scores):
        columns: dict[str, object] = {"id": record.id, "variant": variant.code(offset),
                                      "mutations": len(variant.mutations), "method": summary.method,
                                      "precision": scorer.precision, "score": score.score}
        if both_strands:
            columns.update(score_forward=score.strands[0], score_reverse=score.strands[1])
        rows.append(_with_metadata(record, columns))
    summary.records = len(rows)
    summary.policies.update(scorer.policies)
    write_table(output_path, rows)
    summary.metrics = assay_metrics([record.metadata for record, _ in pairs], [s.score for s in scores])
    return summary


def assay_metrics(metadata: list[dict[str, str]], scores: list[float]) -> str:
    """ProteinGym's five metrics of the scores, for the summary, where the variants carry its `DMS_score` (and
    `DMS_score_bin`) columns: what a reader compares with its tables; why not, where they cannot be computed."""
    if not metadata or "DMS_score" not in metadata[0]:
        return ""
    from biotf.scoring.fitness_metrics import fitness_metrics

    bins = [m["DMS_score_bin"] for m in metadata] if "DMS_score_bin" in metadata[0] else None
    try:
        metrics = fitness_metrics(scores, [m["DMS_score"] for m in metadata], bins, "the variants")
    except InputError as error:
        return f"ProteinGym metrics not computed: {error}"
    return "ProteinGym metrics: " + ", ".join(f"{name} {value:.3f}" for name, value in metrics.items())
