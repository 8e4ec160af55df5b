"""Genome annotation on shipped genomes: does a DNA model that reads more context annotate genes better, and does
a model trained on short windows carry to long ones?

Each base of a GenBank genome is cds_plus, cds_minus, rna or other (`annotation_labels`: the rules for joins,
wrap-around, overlaps and pseudogenes). The model (conf/experiment/genome_annotation.yaml, one token per base) is
trained from random weights on the labels of the A. thaliana chloroplast except a held-out contiguous region
(30 kb of the large single-copy region by default: it has no copy in the inverted repeats, so no held-out gene has
a twin in training), cut into windows of the training context, each with its reverse complement (strands
swapped). It is then scored on the held-out region and on two genomes it never saw (Y. pestis pPCP1, phiX174) at
the training context and at longer ones: each scored piece of a region is read inside a window of that many bases
of its genome (flanks on both sides, across the origin of a circular genome: the held-out region's flanks are
chloroplast bases the model trained on, as input, never their labels), or the whole genome when it is shorter.
Learned positions have no row beyond their training length: "cannot extend", as in `experiment extrapolation`.

Anchors in the same table: the same model trained at a short context (does context help?), a k-mer logistic
baseline and Prodigal trained on the training region (single mode) and in meta mode
(`annotation_anchors`), all scored by `annotation_scores`. The contexts are settings
(`--set eval_contexts=4096,16384`): contexts beyond a few thousand bases need attention whose memory grows
linearly with length, which the model picks up from its config when it has it.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from biotf_recipes.experiments.annotation_scores import AnnotationScores, score_annotation
from biotf_recipes.experiments.annotation_anchors import (KmerLogistic, prodigal_calls, prodigal_finder,
                                                       reverse_complement, reverse_complement_classes)
from biotf_recipes.experiments.annotation_labels import ANNOTATION_CLASSES, AnnotatedGenome, read_annotated
from biotf.errors import ConfigError, InputError
from biotf_recipes.experiments.report import markdown_table, mean_or_none, seed_note, summarize, write_markdown
from biotf_recipes.experiments.runs import Run, compose_config, group_status, train_job
from biotf.conventions import SAMPLES_DIR
from biotf.io.tables import write_rows
from biotf.naming import Parameter, parameter

POSITIONS = ("alibi", "rope", "learned", "sinusoidal", "none")
RESULTS_FILE = "annotation.json"  # per run: scores per genome and context, so a rerun of the report skips evaluation
TABLE_FILE = "annotation.tsv"
SETTINGS_FILE = "settings.json"  # what the output directory's windows and cached scores were made with
# Settings that decide the training windows and what each cached score means: a rerun into the same directory
# must keep them (contexts, positions and the k-mer settings may change: new runs and scores are added).
DATA_SETTINGS = ("train_genome", "test_genomes", "held_out_start", "held_out_length")


@dataclass(frozen=True)
class Settings:
    """What `--set name=value` changes. Contexts are in bases; held_out_* place the held-out region of
    train_genome (0-based start, may cross the origin of a circular genome)."""

    train_genome: str = str(SAMPLES_DIR / "biopython_NC_000932_Athaliana_chloroplast.gb")
    test_genomes: tuple[str, ...] = (str(SAMPLES_DIR / "biopython_NC_005816_Ypestis_pPCP1.gb"),
                                     str(SAMPLES_DIR / "biopython_NC_001422_phiX174.gbk"))
    held_out_start: int = 30_000
    held_out_length: int = 30_000
    train_context: int = 4096
    eval_contexts: tuple[int, ...] = (4096, 16384, 65536, 154478)
    positions: tuple[str, ...] = ("alibi", "rope", "learned")
    short_context: int = 1024  # the anchor "same model, short context", trained with short_position
    short_position: str = "alibi"
    kmer_ks: tuple[int, ...] = (1, 2, 3)
    kmer_window: int = 96

    def __post_init__(self) -> None:
        for name in ("held_out_length", "train_context", "short_context", "kmer_window"):
            if getattr(self, name) < 1:
                raise ConfigError(parameter(f"settings.{name}"), getattr(self, name), "an integer >= 1")
        if not self.eval_contexts or min(self.eval_contexts) < 1:
            raise ConfigError(parameter("settings.eval_contexts"), list(self.eval_contexts), "one or more integers >= 1")
        for pos in (*self.positions, self.short_position):
            if pos not in POSITIONS:
                raise ConfigError(parameter("settings.positions"), pos, " | ".join(POSITIONS))


# quick: the whole pipeline in minutes at small contexts, a smoke test, not a result.
QUICK_SETTINGS = {"train_context": 1024, "short_context": 512, "eval_contexts": (1024, 2048, 4096)}
QUICK_OVERRIDES = ("trainer.max_steps=10", "trainer.val_check_interval=5", "trainer.checkpoint_every_n_steps=5")


def parse_settings(values: dict[str, str], base: Settings | None = None) -> Settings:
    """`base` (the defaults) with `values` (name -> text, e.g. "4096,16384" for a tuple) applied; an unknown name or
    a value of the wrong type is one ConfigError naming it."""
    base = base or Settings()
    types = typing.get_type_hints(Settings)
    changes = {}
    for name, text in values.items():
        if name not in types:
            raise ConfigError(parameter("settings"), name, ", ".join(types))
        kind = types[name]
        item = typing.get_args(kind)[0] if typing.get_origin(kind) is tuple else kind
        try:
            parsed = [item(part.strip()) for part in text.split(",") if part.strip()]
        except ValueError:
            raise ConfigError(parameter(f"settings.{name}"), text, f"{'comma-separated ' if item is not kind else ''}"
                                                     f"{item.__name__} values") from None
        if item is kind and len(parsed) != 1:
            raise ConfigError(parameter(f"settings.{name}"), text, f"one {kind.__name__} value")
        changes[name] = tuple(parsed) if item is not kind else parsed[0]
    return dataclasses.replace(base, **changes)


@dataclass(frozen=True)
class Evaluation:
    """A genome to score: the region start..start + length of `genome` (the whole genome for a test genome)."""

    name: str
    genome: AnnotatedGenome
    start: int
    length: int

    @property
    def truth(self) -> AnnotatedGenome:
        return self.genome.piece(self.start, self.length)


def label_text(labels: np.ndarray) -> str:
    """Per-base class ids as the one-character-per-base labels of a token task ("0" = cds_plus, ...)."""
    return (np.asarray(labels, np.uint8) + ord("0")).tobytes().decode("ascii")


def write_windows(training: AnnotatedGenome, context: int, target: Path) -> Path:
    """The training region as a CSV of `context`-base windows (the last one shorter), each followed by its reverse
    complement with strands swapped; `window` groups the two so that a split keeps them on one side."""
    def rows() -> Iterator[list[str]]:
        for start in range(0, len(training), context):
            sequence, labels = training.sequence[start:start + context], training.labels[start:start + context]
            name = f"{training.id}:{start}"
            yield [name, sequence, label_text(labels), name]
            yield [f"{name}:rc", reverse_complement(sequence), label_text(reverse_complement_classes(labels)), name]

    target.parent.mkdir(parents=True, exist_ok=True)
    return write_rows(target, ["id", "sequence", "label", "window"], rows(), ",", "\r\n")


def context_windows(size: int, circular: bool, start: int, length: int, context: int
                    ) -> list[tuple[int, int, int, int]]:
    """(window start, window length, offset of the scored piece in it, piece length) covering the region
    start..start + length of a genome of `size` bases: pieces of `context` bases (the last one shorter), each
    inside a window of min(context, size) bases centred on it where the genome allows."""
    window = min(context, size)
    piece = min(window, length)
    windows = []
    for begin in range(start, start + length, piece):
        piece_length = min(piece, start + length - begin)
        first = begin - (window - piece_length) // 2
        first = first % size if circular else min(max(first, 0), size - window)
        windows.append((first, window, (begin - first) % size, piece_length))
    return windows


@torch.no_grad()
def model_probabilities(model, tokenizer, classes: list[str], evaluation: Evaluation, context: int,
                        device: torch.device) -> np.ndarray:
    """(region bases, classes) probabilities of a fine-tuned token model read at `context` (`context_windows`)."""
    from biotf.data.collators import content_mask

    columns = [int(name) for name in classes]
    genome = evaluation.genome
    probabilities = np.zeros((evaluation.length, len(ANNOTATION_CLASSES)), np.float32)
    done = 0
    for first, window, offset, piece_length in context_windows(len(genome), genome.circular, evaluation.start,
                                                               evaluation.length, context):
        sequence = genome.piece(first, window).sequence
        ids = torch.tensor(tokenizer.encode(sequence, record=genome.id), device=device)[None]
        attention = torch.ones_like(ids)
        content = content_mask(ids, attention, tokenizer)
        logits = model(ids, attention, content).logits[content]
        probabilities[done:done + piece_length, columns] = (
            logits.float().softmax(-1)[offset:offset + piece_length].cpu().numpy())
        done += piece_length
    return probabilities


def scores_json(scores: AnnotationScores) -> dict:
    return dataclasses.asdict(scores)


def evaluate_run(run_dir: Path, evaluations: list[Evaluation], contexts: list[int]) -> dict[str, dict]:
    """Scores of a fine-tuned run on every evaluation at every context ("cannot extend" for learned positions
    beyond their table; a context that fails, e.g. out of memory, is reported as failed and tried again by a rerun),
    cached in RESULTS_FILE."""
    from biotf.checkpoint.task_model import load_task_model

    results_path = run_dir / RESULTS_FILE
    results = json.loads(results_path.read_text(encoding="utf-8")) if results_path.is_file() else {}
    model, tokenizer, info = load_task_model(run_dir)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model.to(device)
    specials = len(tokenizer.encode("A")) - 1
    config = model.trunk.config
    for evaluation in evaluations:
        truth = evaluation.truth
        for context in sorted({min(c, len(evaluation.genome)) for c in contexts}):
            key = f"{evaluation.name}@{context}"
            if key in results and "error" not in results[key]:
                continue
            if config.pos == "learned" and context + specials > config.max_seq_len:
                results[key] = {"cannot_extend": True}
                continue
            started = time.perf_counter()
            try:
                probabilities = model_probabilities(model, tokenizer, info.classes, evaluation, context, device)
            except RuntimeError as error:  # out of memory, above all: reported, and tried again by a rerun
                results[key] = {"error": str(error).splitlines()[0][:200]}
                continue
            scores = score_annotation(truth.labels, probabilities.argmax(1), probabilities, truth.genes)
            results[key] = {**scores_json(scores), "seconds": time.perf_counter() - started}
            results_path.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    return results


def init_model(overrides: list[str], directory: Path, seed: int):
    """An untrained model of the preset's shape (with `overrides`) and its tokenizer, exported to `directory` (reused
    when present): the init_from of a run that learns from the labels alone. Returns the model's config."""
    from biotf import Model
    from biotf.checkpoint import save_pretrained
    from biotf.model import Transformer
    from biotf.tokenizers.build import build_tokenizer

    if not (directory / "config.json").is_file():
        config = compose_config([*overrides, "task=null", "init_from=null"])
        tokenizer = build_tokenizer(config.tokenizer)
        torch.manual_seed(seed)
        model = Transformer(config.model.for_tokenizer(tokenizer.vocab_size, tokenizer.mask_id))
        directory.parent.mkdir(parents=True, exist_ok=True)
        save_pretrained(model, tokenizer, directory)
    return Model.load(directory).network.config


def train_model(out_dir: Path, overrides: list[str], data_file: Path, pos: str, context: int, seed: int,
                train_context: int) -> Run:
    """Train (or reuse) the token model for one position encoding, training context and seed. A model trained at a
    shorter context than `train_context` (the short-context anchor) takes proportionally more windows per batch, so
    that every model sees the same bases per step and in all: only the context differs."""
    name = f"{pos}_ctx{context}"
    model_overrides = [*overrides, f"model.pos={pos}", f"model.max_seq_len={context + 2}",
                       f"data.max_length={context + 2}", f"data.path={data_file}", f"data.cache_dir={out_dir / 'cache'}",
                       f"seed={seed}"]
    if context != train_context:
        batch_size = compose_config([*model_overrides, "task=null", "init_from=null"]).data.batch_size
        model_overrides.append(f"data.batch_size={max(1, round(batch_size * train_context / context))}")
    init = out_dir / "init" / f"{name}_seed{seed}"
    model = init_model(model_overrides, init, seed)
    # The run's model is init_from's (as its config.yaml records it), so that a rerun recognises the finished run.
    config = dataclasses.replace(compose_config([*model_overrides, f"init_from={init}"]), model=model)
    return train_job(config, out_dir / "runs" / name / f"seed{seed}")


def anchor_scores(settings: Settings, training: AnnotatedGenome, evaluations: list[Evaluation]
                  ) -> dict[str, dict[str, tuple[AnnotationScores, float]]]:
    """method -> evaluation name -> (scores, seconds) of the k-mer baseline and Prodigal (single, meta)."""
    ks = settings.kmer_ks
    kmer_name = f"k-mer logistic (k={ks[0]}..{ks[-1]}, {settings.kmer_window}-base window)"
    started = time.perf_counter()
    kmer = KmerLogistic(ks, settings.kmer_window).fit([training.sequence], [training.labels])
    fit_seconds = time.perf_counter() - started
    finders = {"Prodigal single (trained on the training region)": prodigal_finder("single", training.sequence),
               "Prodigal meta": prodigal_finder("meta")}
    results: dict[str, dict[str, tuple[AnnotationScores, float]]] = {kmer_name: {}, **{name: {} for name in finders}}
    for evaluation in evaluations:
        truth = evaluation.truth
        started = time.perf_counter()
        probabilities = kmer.predict(truth.sequence)
        results[kmer_name][evaluation.name] = (
            score_annotation(truth.labels, probabilities.argmax(1), probabilities, truth.genes),
            time.perf_counter() - started + fit_seconds)
        for name, finder in finders.items():
            started = time.perf_counter()
            calls, scores = prodigal_calls(finder, truth.sequence)
            results[name][evaluation.name] = (
                score_annotation(truth.labels, calls, scores, truth.genes, ("cds_plus", "cds_minus", "other")),
                time.perf_counter() - started)
    return results


HEADER = ["method", "trained at", "context", "genome", *(f"F1 {c}" for c in ANNOTATION_CLASSES),
          *(f"AUPRC {c}" for c in ANNOTATION_CLASSES), "gene recall", "genes", "train s", "eval s"]


def _cells(scores: list[dict]) -> list[str]:
    """F1, AUPRC and gene recall cells of one row: over seeds (mean and min-max), "n/a" where undefined."""
    cells = [summarize([s[part][name] for s in scores]) for part in ("f1", "auprc") for name in ANNOTATION_CLASSES]
    recall = [s["genes_found"] / s["genes"] if s["genes"] else None for s in scores]
    return [*cells, summarize(recall), str(scores[0]["genes"])]


def _seconds(values: list[float | None]) -> str:
    """A time cell: the mean over seeds, one decimal."""
    mean = mean_or_none(values)
    return "n/a" if mean is None else f"{mean:.1f}"


def macro_f1(scores: dict) -> float | None:
    """Mean F1 over the classes that have one (present in the truth, predicted by the method)."""
    return mean_or_none([value for value in scores["f1"].values() if value is not None])


def context_label(context: int, size: int) -> str:
    return f"{context} (whole)" if context == size else str(context)


def write_report(out_dir: Path, settings: Settings, evaluations: list[Evaluation],
                 models: dict[tuple[str, int], list[tuple[Run, dict]]],
                 anchors: dict[str, dict[str, tuple[AnnotationScores, float]]], seeds: tuple[int, ...],
                 quick: bool) -> tuple[Path, str]:
    """annotation.tsv (one row per method, context and genome) and report.md (that table, then macro F1 per
    evaluation context: the extrapolation table); returns report.md's path and the annotation table in markdown."""
    from biotf.finetune.results import RESULT_FILE
    from biotf.untrusted import read_json_object

    rows, extrapolation = [], []
    for (pos, trained), runs in models.items():
        status = group_status([run for run, _ in runs])
        train_seconds = [read_json_object(run.directory / RESULT_FILE, "fine-tuning result").get("train_seconds")
                         if (run.directory / RESULT_FILE).is_file() else None for run, _ in runs]
        for evaluation in evaluations:
            size = len(evaluation.genome)
            cells_by_context = {}
            for context in sorted({min(c, size) for c in (trained, *settings.eval_contexts)}):
                key = f"{evaluation.name}@{context}"
                found = [results.get(key) for _, results in runs if results.get(key)]
                method = f"biotf pos={pos}" + ("" if status == "ok" else f" ({status})")
                label = context_label(context, size)
                if not found:
                    cell = "n/a"
                elif any("cannot_extend" in f for f in found):
                    cell = "cannot extend"
                elif any("error" in f for f in found):
                    cell = f"failed: {next(f['error'] for f in found if 'error' in f)}"
                else:
                    cell = None
                if cell is not None:
                    rows.append([method, trained, label, evaluation.name, cell, *[""] * 11])
                    cells_by_context[context] = cell
                    continue
                rows.append([method, trained, label, evaluation.name, *_cells(found),
                             _seconds(train_seconds), _seconds([f["seconds"] for f in found])])
                cells_by_context[context] = summarize([macro_f1(f) for f in found])
            extrapolation.append((evaluation.name, f"{pos} (trained at {trained})", cells_by_context))
    for method, by_genome in anchors.items():
        for evaluation in evaluations:
            scores, seconds = by_genome[evaluation.name]
            rows.append([method, "-", "-", evaluation.name, *_cells([scores_json(scores)]), "-", _seconds([seconds])])
    write_rows(out_dir / TABLE_FILE, HEADER, rows, "\t", "\r\n")
    table = markdown_table(HEADER, rows)
    sections = [f"# Genome annotation{' (QUICK setting: smoke test, not a result)' if quick else ''}",
                f"Trained on {Path(settings.train_genome).name} except bases {settings.held_out_start}.."
                f"{settings.held_out_start + settings.held_out_length - 1} (held out); windows of the training "
                f"context with their reverse complements; the model starts from random weights "
                "(conf/experiment/genome_annotation.yaml). Per-base F1 of the calls and AUPRC (average precision) "
                "per class; gene recall: CDS with >= 80% of their bases called CDS on their strand. n/a: the class "
                "is absent from that genome or the method does not predict it (Prodigal: RNA).",
                table, seed_note(seeds)]
    for name in [evaluation.name for evaluation in evaluations]:
        lines = [(model, cells) for genome, model, cells in extrapolation if genome == name]
        contexts = sorted({context for _, cells in lines for context in cells})
        size = len(next(e.genome for e in evaluations if e.name == name))
        sections += [f"## Train short, test long: macro F1 on {name} by evaluation context (bases)",
                     markdown_table(["model", *(context_label(c, size) for c in contexts)],
                                    [[model, *(cells.get(c, "-") for c in contexts)] for model, cells in lines])]
    return write_markdown(out_dir / "report.md", sections), table


def check_same_data(out_dir: Path, settings: Settings) -> None:
    """Record DATA_SETTINGS in out_dir, or refuse a rerun into it with other values (its windows and cached scores
    were made with those)."""
    path = out_dir / SETTINGS_FILE
    wanted = {name: getattr(settings, name) for name in DATA_SETTINGS}
    wanted["test_genomes"] = list(wanted["test_genomes"])
    if path.is_file():
        stored = json.loads(path.read_text(encoding="utf-8"))
        for name in DATA_SETTINGS:
            if stored.get(name) != wanted[name]:
                raise ConfigError(parameter(f"settings.{name}"), wanted[name], reason=f"{out_dir} holds an experiment "
                                  f"made with {stored.get(name)!r}: choose a new {parameter('out_dir')}")
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(wanted, indent=1) + "\n", encoding="utf-8")


def run(out_dir: Path, seeds: tuple[int, ...], quick: bool = False, settings: dict[str, str] | None = None,
        overrides: tuple[str, ...] = ()) -> Path:
    """Train every model, score it and the anchors, write annotation.tsv and report.md; returns report.md's path."""
    chosen = parse_settings(settings or {}, dataclasses.replace(Settings(), **QUICK_SETTINGS) if quick else None)
    base = ["experiment=genome_annotation", *(QUICK_OVERRIDES if quick else ()), *overrides]
    (train_genome, *_) = read_annotated(chosen.train_genome)
    size = len(train_genome)
    if not 0 <= chosen.held_out_start < size or chosen.held_out_length >= size - chosen.train_context:
        raise ConfigError(Parameter(parameter("settings.held_out_start") + " / held_out_length"), f"{chosen.held_out_start} / "
                          f"{chosen.held_out_length}", f"a region of {Path(chosen.train_genome).name} ({size} bases) "
                          f"that leaves more than train_context={chosen.train_context} bases to train on")
    if not train_genome.circular and chosen.held_out_start + chosen.held_out_length > size:
        raise InputError(f"{chosen.train_genome}: the held-out region runs past the end of a linear genome")
    check_same_data(out_dir, chosen)
    training = train_genome.piece((chosen.held_out_start + chosen.held_out_length) % size, size - chosen.held_out_length)
    evaluations = [Evaluation(f"{train_genome.id} held-out", train_genome, chosen.held_out_start,
                              chosen.held_out_length)]
    for path in chosen.test_genomes:
        for genome in read_annotated(path):
            evaluations.append(Evaluation(genome.id, genome, 0, len(genome)))
    grid = [*((pos, chosen.train_context) for pos in chosen.positions), (chosen.short_position, chosen.short_context)]
    models: dict[tuple[str, int], list[tuple[Run, dict]]] = {}
    for pos, context in dict.fromkeys(grid):
        data_file = out_dir / "data" / f"train_{context}.csv"
        if not data_file.is_file():
            write_windows(training, context, data_file)
        eval_contexts = sorted({context, *chosen.eval_contexts})
        for seed in seeds:
            run_ = train_model(out_dir, base, data_file, pos, context, seed, chosen.train_context)
            results = {} if run_.error else evaluate_run(run_.directory, evaluations, eval_contexts)
            models.setdefault((pos, context), []).append((run_, results))
    anchors = anchor_scores(chosen, training, evaluations)
    report, table = write_report(out_dir, chosen, evaluations, models, anchors, seeds, quick)
    print(table)
    print(f"table: {out_dir / TABLE_FILE}", file=sys.stderr)
    return report
