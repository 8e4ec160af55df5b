"""Train short, test long: does a position encoding carry a model beyond its training length?

Press et al. (ALiBi, ICLR 2022, figure 1) train at one length and evaluate at longer ones: sinusoidal
positions fail beyond the training length, rotary (RoPE) degrades, ALiBi keeps its loss (or improves).
Here the same small causal model (conf/experiment/extrapolation.yaml) is trained with each
`model.pos` on 128-token blocks of a DNA genome and of English text, then evaluated at 128, 256, 512
and 1024 tokens on the same validation tokens ("nonoverlapping evaluation" in the paper: the
validation stream is cut into blocks of each length; every token is scored with the context its
block gives it). Learned positions have no row past `max_seq_len`, so they are reported as unable
to extend rather than evaluated.

Corpora are cut into fixed-size records first: a genome is one record, and the data layer splits
train/validation by record, so an uncut genome would leave one side empty.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from biotf.io.readers import read_records
from biotf.io.tables import write_rows
from biotf.errors import InputError
from biotf_recipes.experiments.report import (markdown_table, mean_or_none, plot_panels, seed_note, summarize,
                                             write_markdown)
from biotf_recipes.experiments.runs import Run, compose_config, group_status, train_job
from biotf.conventions import SAMPLES_DIR
from biotf.training.train_config import TrainConfig

POSITIONS = ("learned", "sinusoidal", "rope", "alibi", "none")
TRAIN_LENGTH = 128
EVAL_LENGTHS = (128, 256, 512, 1024)
# Sinusoidal positions have unit amplitude; Vaswani et al. (section 3.4) and fairseq, whose models Press
# et al. evaluate, scale token embeddings by sqrt(d_model) to match. Without it (init std 0.02) the fixed
# sines drown the tokens and the model barely trains, which would test the recipe, not the extrapolation.
POSITION_OVERRIDES = {"sinusoidal": ("model.scale_embeddings=true",)}
CHUNK_CHARACTERS = 2048  # per record: a 1,024-token evaluation block spans at most two records
RESULTS_FILE = "extrapolation.json"  # per run: eval length -> loss, so a rerun of the report skips evaluation
EVAL_TOKENS_PER_BATCH = 16384


@dataclass(frozen=True)
class Corpus:
    """A shipped file, how its records join into one stream, and the tokenizer overrides it trains with."""

    source: str  # a file in data/
    joiner: str
    tokenizer: tuple[str, ...]


CORPORA = {
    # Arabidopsis thaliana chloroplast genome (154,478 bp), one token per nucleotide.
    "dna": Corpus("biopython_NC_000932_Athaliana_chloroplast.gb", "", ("tokenizer=dna_char",)),
    # tiny-shakespeare's first 10,000 lines, byte-level BPE with 1,024 tokens learned on the training split.
    "text": Corpus("tinyshakespeare_head10k.txt", "\n", ("tokenizer=bpe", "tokenizer.vocab_size=1024")),
}


# --quick: a smoke test of the whole pipeline (minutes), not a result.
QUICK_CORPORA = ("dna",)
QUICK_OVERRIDES = ("trainer.max_steps=10", "trainer.val_check_interval=5", "trainer.checkpoint_every_n_steps=5")


def chunk_corpus(corpus: Corpus, target: Path) -> Path:
    """The corpus as a CSV of `CHUNK_CHARACTERS`-character records (columns id, sequence)."""
    source = SAMPLES_DIR / corpus.source
    if not source.is_file():
        raise InputError(f"corpus file {source} is missing: it ships in data/ (see its README.md)")
    stream = corpus.joiner.join(record.sequence for record in read_records(source))
    target.parent.mkdir(parents=True, exist_ok=True)
    return write_rows(target, ["id", "sequence"], ([f"{source.stem}:{start}", stream[start:start + CHUNK_CHARACTERS]]
                                                   for start in range(0, len(stream), CHUNK_CHARACTERS)), ",", "\r\n")


@torch.no_grad()
def evaluate_lengths(config: TrainConfig, run_dir: Path, lengths: tuple[int, ...] = EVAL_LENGTHS) -> dict[int, float | None]:
    """Mean next-token loss at each evaluation length over the same validation tokens (None: the model
    cannot take that length). The validation stream is cut into blocks of the longest length, and each
    of those into blocks of every shorter one, so every length scores the same tokens."""
    from biotf import Model
    from biotf.model.loss import language_model_loss
    from biotf.training.run import prepare_data

    loaded = Model.load(run_dir)
    model, tokenizer = loaded.network, loaded.tokenizer
    longest = max(lengths)
    # The plain stream (no document masking, whatever training used): contexts of every length, across records.
    longest_config = dataclasses.replace(config, data=dataclasses.replace(config.data, max_length=longest,
                                                                          packing=False))
    validation = prepare_data(longest_config, tokenizer).validation
    blocks = [item["input_ids"] for item in (validation[i] for i in range(len(validation)))
              if bool(item["attention_mask"].all())]
    if not blocks:
        raise InputError(f"the validation split of {config.data.path} has fewer than {longest} tokens: "
                         f"raise data.validation_fraction ({config.data.validation_fraction})")
    tokens = torch.stack(blocks)
    losses: dict[int, float | None] = {}
    for length in lengths:
        if config.model.pos == "learned" and length > config.model.max_seq_len:
            losses[length] = None
            continue
        rows = tokens.reshape(-1, length)
        total = 0.0
        for batch in rows.split(max(1, EVAL_TOKENS_PER_BATCH // length)):
            # Each row has length - 1 targets; only the loss is needed, not the (rows x length x vocab) logits.
            total += float(language_model_loss(model, batch, batch, fused=True).loss) * len(batch)
        losses[length] = total / len(rows)
    return losses


def run_one(out_dir: Path, base: list[str], corpus_name: str, data_file: Path, pos: str, seed: int
            ) -> tuple[Run, dict[int, float | None]]:
    """Train (or reuse) one run and evaluate it at every length (cached in the run's RESULTS_FILE)."""
    run_dir = out_dir / corpus_name / pos / f"seed{seed}"
    config = compose_config([*base, *CORPORA[corpus_name].tokenizer, f"data.path={data_file}",
                             "data.column=sequence", "data.id_column=id", f"data.cache_dir={out_dir / 'cache'}",
                             f"model.pos={pos}", *POSITION_OVERRIDES.get(pos, ()), f"seed={seed}"])
    run = train_job(config, run_dir)
    results = run_dir / RESULTS_FILE
    if run.error is not None:
        return run, {length: None for length in EVAL_LENGTHS}
    if not results.is_file():
        losses = evaluate_lengths(config, run_dir)
        results.write_text(json.dumps({str(k): v for k, v in losses.items()}) + "\n", encoding="utf-8")
    return run, {int(k): v for k, v in json.loads(results.read_text(encoding="utf-8")).items()}


def relative_change(losses: dict[int, list[float | None]]) -> float | None:
    """Loss at the longest evaluation length over the loss at the training length, minus one."""
    start, end = mean_or_none(losses[TRAIN_LENGTH]), mean_or_none(losses[max(EVAL_LENGTHS)])
    return None if start is None or end is None else end / start - 1.0


def write_report(out_dir: Path, results: dict[str, dict[str, list[tuple[Run, dict[int, float | None]]]]],
                 seeds: tuple[int, ...], base: TrainConfig, quick: bool) -> Path:
    """report.md and extrapolation.png in `out_dir`: loss per evaluation length, one line per encoding.
    `base` is the config every run starts from (before corpus, encoding and seed)."""
    header = ["corpus", "pos", *(f"loss @ {length}" for length in EVAL_LENGTHS),
              f"change {TRAIN_LENGTH}->{max(EVAL_LENGTHS)}", "training"]
    rows, panels, diverged = [], {}, set()
    for corpus_name, by_pos in results.items():
        panel, title = {}, f"{corpus_name} (trained at {TRAIN_LENGTH})"
        for pos, runs in by_pos.items():
            per_length = {length: [losses[length] for _, losses in runs] for length in EVAL_LENGTHS}
            status = group_status([run for run, _ in runs])
            if status != "ok":
                diverged.add((title, pos))
            cells = [summarize(values) if any(v is not None for v in values)
                     else ("cannot extend" if pos == "learned" and length > TRAIN_LENGTH else "n/a")
                     for length, values in per_length.items()]
            change = relative_change(per_length)
            rows.append([corpus_name, pos, *cells, "n/a" if change is None else f"{change:+.1%}", status])
            panel[pos] = {float(length): [v for v in values if v is not None]
                          for length, values in per_length.items() if any(v is not None for v in values)}
        panels[title] = panel
    picture = plot_panels(panels, out_dir / "extrapolation.png", "evaluation length (tokens)",
                          "validation loss (nats/token)", diverged, log2_x=True)
    title = "# Train short, test long" + (" (QUICK setting: smoke test, not a result)" if quick else "")
    return write_markdown(out_dir / "report.md", [
        title,
        f"A causal model (conf/experiment/extrapolation.yaml) trained for {base.trainer.max_steps} steps on "
        f"{TRAIN_LENGTH}-token blocks with each position encoding, evaluated on the same validation tokens "
        f"cut into blocks of {', '.join(map(str, EVAL_LENGTHS))} tokens. Loss in nats/token; learned "
        f"positions have no table rows beyond {TRAIN_LENGTH}. Sinusoidal runs scale token embeddings by "
        "sqrt(d_model), as Vaswani et al. do.",
        markdown_table(header, rows),
        seed_note(seeds),
        "Press et al. (2022) predict: sinusoidal fails beyond the training length, RoPE degrades, ALiBi "
        "holds its loss. `change` is the loss at the longest length relative to the training length.",
        f"![loss vs evaluation length]({picture.name})",
    ])


def run(out_dir: Path, seeds: tuple[int, ...], quick: bool = False) -> Path:
    """Every corpus x position encoding x seed, then the report; returns report.md's path."""
    overrides = ["experiment=extrapolation", *(QUICK_OVERRIDES if quick else ())]
    results: dict[str, dict[str, list[tuple[Run, dict[int, float | None]]]]] = {}
    for corpus_name in QUICK_CORPORA if quick else tuple(CORPORA):
        data_file = chunk_corpus(CORPORA[corpus_name], out_dir / "data" / f"{corpus_name}.csv")
        results[corpus_name] = {pos: [run_one(out_dir, overrides, corpus_name, data_file, pos, seed)
                                      for seed in seeds] for pos in POSITIONS}
    return write_report(out_dir, results, seeds, compose_config(overrides), quick)
