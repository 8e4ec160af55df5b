"""What a model's token embeddings learnt (`biotf tokens`): do they carry known properties of the tokens?

    report = analyse_tokens("outputs/protein_mlm/<run>")     # the shipped amino-acid scales (`scales`)
    report = analyse_tokens("dna_run/", "gc_content.tsv")     # any table: token -> one or more numbers

The input embedding of each token (a row of the model's embedding matrix) is compared with each property of a
table (token -> value): how well does a linear map of the embedding predict the property? The answer is the
leave-one-out R^2 of a ridge regression over the tokens that have a value (`loo_ridge_r2`), for the model and for
the same architecture at initialisation (biotf's initialisation of the model's config under `torch.manual_seed`),
which says how much of the figure training brought: ridge on 20 tokens in 64+ dimensions can fit noise.

Ridge: the embeddings of the scored tokens are centred and divided by their root-mean-square distance from their
mean (so one alpha means the same for a trained model and for its initialisation, whose embeddings are ~0.02
wide), then sklearn's `Ridge(alpha)` (unpenalised intercept) is fitted n times, each time without one token, and
predicts it; R^2 = 1 - sum((y - loo)^2) / sum((y - mean y)^2), so 0 is predicting the mean and it can be negative.
The n fits are computed in closed form (residual / (1 - leverage)), which is exact for ridge.

The 2-D map is a PCA (sklearn) of each model's embeddings, fitted on the tokens the table scores (the special and
unused tokens would otherwise set the axes) and applied to every token.

Nothing is dropped unsaid: the model's tokens without a value in the table are kept in the output with empty
values and counted; tokens of the table that the model lacks are counted and named; a table that names no token of
the model, or a property with fewer than MIN_TOKENS values or one value for all, is refused in one line.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import torch

from biotf.analysis.plot import pyplot, save_figure
from biotf_recipes.scales import AMINO_ACID_SCALES
from biotf.checkpoint.loading import LoadedModel, as_loaded
from biotf.io.readers import ReaderOptions, read_records
from biotf.io.tables import write_rows
from biotf.errors import ConfigError, InputError
from biotf.model import Transformer, TransformerConfig
from biotf.conventions import counted
from biotf.naming import parameter

SHIPPED = "amino-acid scales (biotf_recipes.scales)"
MIN_TOKENS = 3  # leave-one-out needs two tokens to fit on
DEFAULT_ALPHA = 1.0
DEFAULT_TOKEN_COLUMN = "token"
MODELS = ("trained", "init")
NAMED = 10  # tokens named in a summary before "and N more"
ANNOTATE_MAX = 64  # a map labels its scored tokens when there are at most this many


@dataclass(frozen=True)
class PropertyTable:
    """property -> token -> value, and where it came from."""

    source: str
    values: dict[str, dict[str, float]]

    @property
    def tokens(self) -> list[str]:
        return list(dict.fromkeys(token for column in self.values.values() for token in column))


@dataclass(frozen=True)
class PropertyScore:
    """One property's leave-one-out ridge R^2 on the model's and the initial embeddings, over `scored` tokens."""

    name: str
    scored: int
    unscored: int
    r2: dict[str, float]


@dataclass
class TokenReport:
    """Every token of the model with its map coordinates (per model) and property values (NaN: none), the R^2 of
    each property, and what the table and the model did not share."""

    tokens: list[str]
    ids: np.ndarray
    coordinates: dict[str, np.ndarray]
    properties: list[str]
    values: np.ndarray
    scores: list[PropertyScore]
    table: str
    alpha: float
    init_seed: int
    not_in_model: list[str] = field(default_factory=list)
    extra_rows: int = 0
    model: str | None = None  # where the model came from (`LoadedModel.source`): the maps' title

    @property
    def without_value(self) -> list[str]:
        """The model's tokens with no value for any property (special tokens, rare letters, ...)."""
        return [token for token, row in zip(self.tokens, self.values) if np.isnan(row).all()]

    def summary(self) -> str:
        extra = (f"; {counted(self.extra_rows, 'embedding row')} beyond the tokenizer's vocabulary left out"
                 if self.extra_rows else "")
        return (f"{counted(len(self.tokens), 'token')} of the model, {len(self.tokens) - len(self.without_value)} "
                f"with a value in {self.table}; without any value: {_named(self.without_value)}; in the table but "
                f"not in the model: {_named(self.not_in_model)}{extra}")


def _named(tokens: Sequence[str]) -> str:
    if not tokens:
        return "none"
    shown = ", ".join(repr(token) for token in tokens[:NAMED])
    return f"{len(tokens)} ({shown}{f' and {len(tokens) - NAMED} more' if len(tokens) > NAMED else ''})"


def read_property_table(path: str | Path, token_column: str = DEFAULT_TOKEN_COLUMN) -> PropertyTable:
    """A CSV/TSV file (shared readers: gzip, BOM, quoting) whose `token_column` names a token and every other column
    is a number (empty: no value); a repeated token, a non-number and a table without property columns are
    refused in one line naming the row."""
    values: dict[str, dict[str, float]] = {}
    seen: set[str] = set()
    # the token column is also the id column: else a column named `id` would be taken as ids, not as a property
    for record in read_records(path, ReaderOptions(column=token_column, id_column=token_column)):
        where = f"{path}: row {record.index + 1} (token {record.sequence!r})"
        if record.sequence in seen:
            raise InputError(f"{where}: the token is in the table twice")
        seen.add(record.sequence)
        if not record.metadata:
            raise InputError(f"{path}: no property column beside {token_column!r}")
        for name, text in record.metadata.items():
            column = values.setdefault(name, {})
            if text == "":
                continue
            try:
                number = float(text)
            except ValueError:
                raise InputError(f"{where}: {name} is {text!r}, not a number (leave it empty for no value)") from None
            if not math.isfinite(number):
                raise InputError(f"{where}: {name} is {text!r}; values must be finite")
            column[record.sequence] = number
    return PropertyTable(str(path), values)


def shipped_table() -> PropertyTable:
    return PropertyTable(SHIPPED, AMINO_ACID_SCALES)


def loo_ridge_r2(features: np.ndarray, targets: np.ndarray, alpha: float = DEFAULT_ALPHA) -> float:
    """Leave-one-out R^2 of ridge regression (`alpha`, unpenalised intercept) of `targets` (n,) on `features`
    (n, d), after centring and dividing the features by their RMS distance from the mean (module docstring).
    Closed form: the held-out residual of ridge is the in-sample residual / (1 - leverage)."""
    x = np.asarray(features, dtype=np.float64)
    y = np.asarray(targets, dtype=np.float64)
    x = x - x.mean(0)
    scale = math.sqrt(float((x ** 2).sum(1).mean()))
    if scale > 0:
        x = x / scale
    u, singular, _ = np.linalg.svd(x, full_matrices=False)
    shrink = singular ** 2 / (singular ** 2 + alpha)
    centred = y - y.mean()
    fitted = (u * shrink) @ (u.T @ centred)
    leverage = 1.0 / len(y) + (u ** 2 * shrink).sum(1)
    held_out = (centred - fitted) / (1.0 - leverage)
    return float(1.0 - (held_out ** 2).sum() / (centred ** 2).sum())


def initial_model(config: TransformerConfig, seed: int) -> Transformer:
    """The architecture of `config` as biotf initialises it after `torch.manual_seed(seed)` (the global random
    state is left as it was)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Transformer(config)


def embedding_rows(model: Transformer, count: int) -> np.ndarray:
    """The first `count` rows of the input embedding matrix, float64 on the CPU."""
    return model.embed.weight[:count].detach().to("cpu", torch.float64).numpy()


def token_map(embeddings: np.ndarray, scored: np.ndarray) -> np.ndarray:
    """(V, 2) PCA coordinates of every row, the PCA fitted on the `scored` rows."""
    from sklearn.decomposition import PCA

    return PCA(n_components=2, random_state=0).fit(embeddings[scored]).transform(embeddings)


def _check_properties(table: PropertyTable, tokens: list[str]) -> None:
    known = set(tokens)
    if not known & set(table.tokens):
        raise InputError(f"{table.source}: none of its {counted(len(table.tokens), 'token')} is a token of the model "
                         f"(e.g. {', '.join(map(repr, table.tokens[:3]))}; the model's: "
                         f"{', '.join(map(repr, tokens[:8]))}, ...); tokens must match exactly, case included")
    for name, column in table.values.items():
        present = [value for token, value in column.items() if token in known]
        if len(present) < MIN_TOKENS:
            raise InputError(f"{table.source}: property {name!r} has {len(present)} values on tokens of the model; "
                             f"a leave-one-out R^2 needs at least {MIN_TOKENS}")
        if len(set(present)) == 1:
            raise InputError(f"{table.source}: property {name!r} has the one value {present[0]:g} for every token of "
                             "the model it scores, so R^2 is undefined")


def analyse_tokens(model_source: str | Path | LoadedModel | Callable[[], LoadedModel],
                   table: PropertyTable | None = None, alpha: float = DEFAULT_ALPHA, init_seed: int = 0,
                   device: str = "cpu") -> TokenReport:
    """The report of the module docstring for the model at `model_source` and `table` (default: the shipped
    amino-acid scales); every refusal comes before any figure is computed, and before the model is loaded where
    `model_source` is a source (`biotf.Model.load`) or a loader (`as_loaded`)."""
    if not alpha > 0:
        raise ConfigError(parameter("ridge_alpha"), alpha, allowed="a number > 0")
    table = table if table is not None else shipped_table()
    if isinstance(model_source, (str, Path)):  # a source: loaded as every command loads one, after the checks above
        from biotf import Model

        model_source = partial(Model.load, model_source, device=device)
    loaded = as_loaded(model_source, device)
    model, tokenizer = loaded.network, loaded.tokenizer
    vocabulary = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    vocabulary = [(token, index) for token, index in vocabulary if index < model.config.vocab_size]
    tokens = [token for token, _ in vocabulary]
    ids = np.array([index for _, index in vocabulary], dtype=np.int64)
    _check_properties(table, tokens)
    properties = list(table.values)
    values = np.array([[table.values[name].get(token, np.nan) for name in properties] for token in tokens])
    models = {"trained": embedding_rows(model, model.config.vocab_size)[ids],
              "init": embedding_rows(initial_model(model.config, init_seed), model.config.vocab_size)[ids]}
    scored_any = ~np.isnan(values).all(1)
    scores = []
    for column, name in enumerate(properties):
        scored = ~np.isnan(values[:, column])
        r2 = {which: loo_ridge_r2(embeddings[scored], values[scored, column], alpha)
              for which, embeddings in models.items()}
        scores.append(PropertyScore(name, int(scored.sum()), int((~scored).sum()), r2))
    known = set(tokens)
    return TokenReport(tokens, ids, {which: token_map(e, scored_any) for which, e in models.items()}, properties,
                       values, scores, table.source, alpha, init_seed,
                       [token for token in table.tokens if token not in known],
                       model.config.vocab_size - len(tokens), loaded.source)


def _number(value: float) -> str:
    return "" if np.isnan(value) else f"{value:.6g}"


def write_tokens(report: TokenReport, path: str | Path) -> None:
    """One row per token: token, id, trained_pc1, trained_pc2, init_pc1, init_pc2, then each property (empty: no
    value)."""
    header = ["token", "id", *(f"{which}_pc{k}" for which in MODELS for k in (1, 2)), *report.properties]
    rows = [[token, str(index), *(f"{report.coordinates[which][row, k]:.6g}" for which in MODELS for k in (0, 1)),
             *map(_number, report.values[row])] for row, (token, index) in enumerate(zip(report.tokens, report.ids))]
    write_rows(path, header, rows)


SCORE_COLUMNS = ("property", "tokens_scored", "tokens_without_value", "r2_trained", "r2_init", "ridge_alpha",
                 "init_seed")


def score_lines(report: TokenReport) -> list[list[str]]:
    """The R^2 table (SCORE_COLUMNS) with its header, one row per property."""
    return [list(SCORE_COLUMNS), *([score.name, str(score.scored), str(score.unscored),
                                    *(f"{score.r2[which]:.4f}" for which in MODELS), f"{report.alpha:g}",
                                    str(report.init_seed)] for score in report.scores)]


def score_table(report: TokenReport) -> str:
    """The R^2 table as `biotf tokens` prints it: tab-separated lines, the header first."""
    return "\n".join("\t".join(line) for line in score_lines(report))


def write_scores(report: TokenReport, path: str | Path) -> None:
    header, *rows = score_lines(report)
    write_rows(path, header, rows)


def scores_path(output: str | Path) -> Path:
    """Where the R^2 table goes beside the token table: tokens.tsv -> tokens.r2.tsv."""
    output = Path(output)
    return output.with_name(f"{output.stem}.r2.tsv")


def plot_tokens(report: TokenReport, path: str | Path, title: str) -> Path:
    """One panel per property (columns) and model (rows: trained, init): the 2-D map coloured by the property,
    tokens without a value in grey; labelled by token when at most ANNOTATE_MAX are scored."""
    plt = pyplot()
    count = len(report.properties)
    figure, axes = plt.subplots(len(MODELS), count, figsize=(4.6 * count, 4.2 * len(MODELS)), squeeze=False)
    for row, which in enumerate(MODELS):
        coordinates = report.coordinates[which]
        for column, score in enumerate(report.scores):
            panel = axes[row, column]
            values = report.values[:, column]
            scored = ~np.isnan(values)
            panel.scatter(coordinates[~scored, 0], coordinates[~scored, 1], s=12, color="lightgrey", linewidths=0)
            points = panel.scatter(coordinates[scored, 0], coordinates[scored, 1], c=values[scored], s=36,
                                   cmap="viridis", linewidths=0)
            figure.colorbar(points, ax=panel, label=score.name)
            if scored.sum() <= ANNOTATE_MAX:
                for token, (x, y) in zip(np.array(report.tokens, dtype=object)[scored], coordinates[scored]):
                    panel.annotate(token, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
            label = "trained" if which == "trained" else f"initialisation (seed {report.init_seed})"
            panel.set_title(f"{label}: LOO ridge R^2 {score.r2[which]:.2f}", fontsize="medium")
            panel.set_xlabel("PC 1")
            panel.set_ylabel("PC 2")
    figure.suptitle(f"{title}: input embeddings, PCA fitted on the scored tokens (grey: no value)")
    figure.tight_layout()
    return save_figure(figure, path)


def tokens_file(model_source: str | Path | LoadedModel | Callable[[], LoadedModel], output: str | Path,
                plot: str | Path | None = None, table: PropertyTable | None = None, alpha: float = DEFAULT_ALPHA,
                init_seed: int = 0, device: str = "cpu") -> TokenReport:
    """`analyse_tokens`, written: the token table to `output`, the R^2 table to `scores_path(output)` and, with
    `plot`, the maps as a PNG. The caller checks the three paths against the output rule first."""
    report = analyse_tokens(model_source, table, alpha, init_seed, device)
    write_tokens(report, output)
    write_scores(report, scores_path(output))
    if plot is not None:
        plot_tokens(report, plot, Path(report.model or "").name or str(report.model))
    return report
