"""Linear probes: do the embeddings carry the label, and more than a classical baseline does?

The same probe, on the same cross-validation folds, is fitted to every embedding array of the file (one
per exported layer), to the classical baseline of the sequence kind (`biotf.analysis.feature_baselines`) and to a
trivial predictor (majority class / training mean), so one table answers "did the model beat counting?".
Probes are deliberately linear (standardised features, then logistic regression or ridge with its penalty
chosen by internal CV) as in the probing literature (Alain & Bengio 2016; Rives et al. 2021 for proteins):
what a linear map can read out is what the representation makes explicit.

Records are never dropped silently: unlabelled records, duplicate sequences (`deduplicate`; copies with
conflicting labels are all dropped) and classes too small for stratified k-fold are counted in `dropped`.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from biotf.analysis.feature_baselines import baseline
from biotf.analysis.probe_labels import labels as column_labels, left_out_lines
from biotf.data.labels import numeric
from biotf.errors import ConfigError, InputError
from biotf.naming import given, parameter

TASKS = ("auto", "classification", "regression")
REGRESSION_MIN_DISTINCT = 10  # "auto": numeric labels with more distinct values than this are regression


@dataclass
class ProbeRow:
    name: str
    dim: int
    scores: np.ndarray  # one per fold


@dataclass
class ProbeReport:
    task: str
    metric: str  # "accuracy" (higher is better) or "RMSE" (lower is better)
    n_records: int
    n_classes: int | None
    folds: int
    rows: list[ProbeRow]
    dropped: Counter = field(default_factory=Counter)
    unparsable: list[str] = field(default_factory=list)  # ids of the SMILES RDKit cannot parse, left out

    def table(self) -> str:
        width = max(len(row.name) for row in self.rows)
        over = f"mean ± sd over {self.folds} folds" if self.folds > 1 else "on the test split"
        lines = [f"{'features':{width}s}  {'dim':>5s}  {self.metric} ({over})"]
        for row in self.rows:
            dim = str(row.dim) if row.dim else "-"
            spread = f" ± {row.scores.std():.3f}" if self.folds > 1 else ""
            lines.append(f"{row.name:{width}s}  {dim:>5s}  {row.scores.mean():.3f}{spread}")
        return "\n".join(lines)


def _task(task: str, values: np.ndarray) -> str:
    if task not in TASKS:
        raise ConfigError(parameter("task"), task, allowed=", ".join(TASKS))
    if task != "auto":
        return task
    as_numbers = numeric(values)
    if as_numbers is not None and len(np.unique(as_numbers)) > REGRESSION_MIN_DISTINCT:
        return "regression"
    return "classification"


def select_records(sequences: np.ndarray, values: np.ndarray, deduplicate: bool, dropped: Counter) -> np.ndarray:
    """Indices of the records to probe: labelled, and with `deduplicate` one per distinct sequence."""
    keep = values != ""
    dropped["unlabelled"] += int((~keep).sum())
    if not deduplicate:
        return np.flatnonzero(keep)
    first: dict[str, int] = {}
    conflicting: set[str] = set()
    for index in np.flatnonzero(keep):
        sequence = str(sequences[index])
        if sequence in first:
            dropped["duplicate sequence"] += 1
            if values[first[sequence]] != values[index]:
                conflicting.add(sequence)
        else:
            first[sequence] = index
    dropped["duplicate with conflicting labels"] += len(conflicting)
    return np.array(sorted(i for s, i in first.items() if s not in conflicting), np.int64)


def probe_estimators(task: str, seed: int):
    """(probe, trivial predictor) for the task; features are standardised inside each training fold."""
    from sklearn.dummy import DummyClassifier, DummyRegressor
    from sklearn.linear_model import LogisticRegression, RidgeCV
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if task == "classification":
        return (make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, random_state=seed)),
                DummyClassifier(strategy="most_frequent"))
    return make_pipeline(StandardScaler(), RidgeCV(alphas=np.logspace(-2, 4, 13))), DummyRegressor()


def cross_validate(features: np.ndarray, target: np.ndarray, splits: list[tuple[np.ndarray, np.ndarray]],
                   estimator, task: str) -> np.ndarray:
    """Score per fold: accuracy, or root-mean-square error."""
    from sklearn.base import clone

    scores = []
    for train, test in splits:
        model = clone(estimator).fit(features[train], target[train])
        predicted = model.predict(features[test])
        if task == "classification":
            scores.append(float(np.mean(predicted == target[test])))
        else:
            scores.append(float(np.sqrt(np.mean((predicted - target[test]) ** 2))))
    return np.array(scores)


def run_probe(arrays: dict[str, np.ndarray], values: np.ndarray, sequences: np.ndarray, ids: np.ndarray,
              kind: str | None, task: str = "auto", folds: int = 5, seed: int = 0, deduplicate: bool = False,
              baseline_kind: str | None = "auto", model_name: str = "biotf",
              split: np.ndarray | None = None, invalid_smiles: str = "error") -> ProbeReport:
    """Probe every array in `arrays` (name -> (N, D)), the baseline and a trivial predictor on the same folds.

    `split` (one of train / validation / test / "" per record, e.g. a fine-tuning run's split.tsv) replaces the
    folds by that one split: fitted on train + validation, scored on test; records with "" are left out (counted).

    `kind` is the tokenizer kind the file was made with; `baseline_kind` "auto" uses it, None skips the
    baseline, any other value names one of `biotf.analysis.feature_baselines.BASELINES`. A SMILES RDKit cannot parse has no
    Morgan fingerprint: refused naming `--invalid-smiles` (`invalid_smiles` "error"), or left out of every row,
    counted and listed ("skip").
    """
    from sklearn.model_selection import KFold, StratifiedKFold

    if folds < 2:
        raise ConfigError(parameter("folds"), folds, allowed="an integer >= 2")
    dropped: Counter = Counter()
    chosen = select_records(sequences, values, deduplicate, dropped)
    if split is not None:
        outside = split[chosen] == ""
        dropped["not in the split"] += int(outside.sum())
        chosen = chosen[~outside]
    kind = kind if baseline_kind == "auto" else baseline_kind
    unparsable: list[str] = []
    if kind == "smiles":  # before the folds: every row is fitted on the same records
        from biotf.chemistry import molecules

        _, bad = molecules([str(s) for s in sequences[chosen]], [str(i) for i in ids[chosen]], invalid_smiles,
                           parameter("invalid_smiles"))
        if bad:
            unparsable = [str(ids[chosen[i]]) for i in bad]
            dropped[f"SMILES RDKit cannot parse ({given('invalid_smiles', 'skip')})"] += len(bad)
            chosen = np.delete(chosen, bad)
    task = _task(task, values[chosen])
    labels = values[chosen]
    n_classes = None
    if task == "classification":
        counts = Counter(labels.tolist())
        small = {label for label, count in counts.items() if count < folds}
        if small and split is None:
            dropped[f"in classes with < {folds} records ({', '.join(sorted(small))})"] += sum(counts[s] for s in small)
            chosen = chosen[~np.isin(labels, list(small))]
            labels = values[chosen]
        n_classes = len(set(labels.tolist()))
        if n_classes < 2:
            raise InputError(f"the probe needs at least 2 classes with >= {folds} records each, found {n_classes}")
        target = labels
        splitter = StratifiedKFold(folds, shuffle=True, random_state=seed)
    else:
        target = numeric(labels)
        if target is None:
            record, value = next((r, v) for r, v in zip(ids[chosen], labels) if numeric(np.array([v])) is None)
            raise InputError(f"record {str(record)!r}: label {str(value)!r} is not a number "
                             f"(regression needs numeric labels; allowed: {given('task', 'classification')})")
        splitter = KFold(folds, shuffle=True, random_state=seed)
    if split is not None:
        side = split[chosen]
        splits = [(np.flatnonzero(side != "test"), np.flatnonzero(side == "test"))]
        folds = 1
        if not len(splits[0][0]) or not len(splits[0][1]):
            raise InputError("the split leaves no labelled record on the train or on the test side")
    else:
        if len(chosen) < folds:
            raise InputError(f"only {len(chosen)} records to probe, fewer than {parameter('folds')} {folds}")
        splits = list(splitter.split(np.zeros(len(chosen)), target))
    probe, trivial = probe_estimators(task, seed)

    rows = [ProbeRow(f"{model_name} {name}", array.shape[1], cross_validate(array[chosen], target, splits, probe, task))
            for name, array in arrays.items()]
    if kind is not None:
        description, featurize = baseline(kind)
        features = featurize([str(s) for s in sequences[chosen]], [str(i) for i in ids[chosen]])
        rows.append(ProbeRow(f"baseline: {description}", features.shape[1],
                             cross_validate(features, target, splits, probe, task)))
    placeholder = np.zeros((len(chosen), 1))
    rows.append(ProbeRow("majority class" if task == "classification" else "mean of training labels", 0,
                         cross_validate(placeholder, target, splits, trivial, task)))
    return ProbeReport(task, "accuracy" if task == "classification" else "RMSE", len(chosen), n_classes, folds,
                       rows, +dropped, unparsable)


def probe_embeddings(path: str | Path, label: str, label_pattern: str | None = None, task: str = "auto",
                     folds: int = 5, seed: int = 0, deduplicate: bool = False, baseline_kind: str | None = "auto",
                     split: str | Path | None = None, invalid_smiles: str = "error") -> list[str]:
    """`biotf probe`: `run_probe` on an embedding file's arrays and its `label` column (its `label_pattern`'s
    first group), on folds or on `split`'s test records (a split.tsv). Returns the lines it prints: what was
    probed, what was left out, the table."""
    from biotf.data.splits import sides_of
    from biotf.io.embeddings import read_embeddings  # pandas and friends: not when `biotf probe --help` reads TASKS

    table = read_embeddings(path)
    values = column_labels(table, label, label_pattern)
    sides = None if split is None else sides_of(split, table.ids)
    report = run_probe(table.arrays, values, table.sequences, table.ids, table.info.get("tokenizer"), task, folds,
                       seed, deduplicate, baseline_kind, model_name=f"model ({table.info.get('pool')} pool)",
                       split=sides, invalid_smiles=invalid_smiles)
    label = label + (f" ~ {label_pattern}" if label_pattern else "")
    classes = f", {report.n_classes} classes" if report.n_classes else ""
    probe = "logistic regression" if report.task == "classification" else "ridge regression"
    scheme = f"{report.folds}-fold CV" if split is None else f"train + validation -> test of {split}"
    return [f"{path}: {report.n_records} records, label {label}{classes}; {probe}, {scheme}",
            *left_out_lines("left out: ", report.dropped, report.unparsable), report.table()]
