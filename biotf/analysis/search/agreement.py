"""kNN label agreement: how often a record's nearest neighbours share its label, in embedding space and by the
modality's classical similarity (`classical`), on the same records and the same queries.

- precision@k: the fraction of a query's k nearest neighbours whose label equals the query's, averaged over
  queries;
- kNN accuracy@k: the majority label of the k nearest neighbours equals the query's (a tie between labels goes to
  the one held by the nearer neighbour), averaged over queries. At k = 1 both are the nearest neighbour's.

Leave-one-out by default: every record queries all the others (never itself; a copy of it elsewhere in the file
still counts). With a split (`split.tsv`: id, split), the test records query the train + validation records.
Records left out (no label, not in the split file, no classical features) are left out of every row, counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from biotf.analysis.probe_labels import labels as column_labels, left_out_lines
from biotf.analysis.search.classical import KINDS, classical_sets, describe
from biotf.analysis.search.neighbours import exact_search, prepare
from biotf.data.splits import sides_of
from biotf.errors import ConfigError, InputError
from biotf.io.embeddings import read_embeddings
from biotf.naming import parameter


@dataclass
class AgreementRow:
    name: str
    precision: dict[int, float]
    accuracy: dict[int, float]


@dataclass
class AgreementReport:
    ks: list[int]
    scheme: str
    n_queries: int
    n_references: int
    n_classes: int
    majority: float  # the most frequent label's share of the queries: what a constant guess gets
    rows: list[AgreementRow] = field(default_factory=list)
    left_out: dict[str, int] = field(default_factory=dict)
    unparsable: list[str] = field(default_factory=list)  # ids of the SMILES RDKit cannot parse, left out

    def table(self) -> str:
        heads = [f"P@{k}" for k in self.ks] + [f"acc@{k}" for k in self.ks]
        width = max(len(row.name) for row in self.rows)
        lines = [f"{'neighbours':{width}s}  " + "  ".join(f"{h:>6s}" for h in heads)]
        for row in self.rows:
            values = [row.precision[k] for k in self.ks] + [row.accuracy[k] for k in self.ks]
            lines.append(f"{row.name:{width}s}  " + "  ".join(f"{v:6.3f}" for v in values))
        return "\n".join(lines)


def agreement(neighbours: np.ndarray, query_labels: np.ndarray, reference_labels: np.ndarray,
              ks: Sequence[int]) -> tuple[dict[int, float], dict[int, float]]:
    """precision@k and kNN accuracy@k of `neighbours` ((queries, >= max(ks)) reference rows, nearest first)."""
    classes, codes = np.unique(np.concatenate([query_labels, reference_labels]), return_inverse=True)
    query_codes, reference_codes = codes[:len(query_labels)], codes[len(query_labels):]
    found = reference_codes[neighbours]  # (queries, K)
    same = found == query_codes[:, None]
    precision, accuracy = {}, {}
    rows = np.arange(len(found))
    for k in ks:
        counts = np.zeros((len(found), len(classes)), np.int64)
        first = np.full((len(found), len(classes)), np.iinfo(np.int64).max)
        for rank in range(k - 1, -1, -1):
            counts[rows, found[:, rank]] += 1
            first[rows, found[:, rank]] = rank
        tied_best = counts == counts.max(axis=1, keepdims=True)
        vote = np.argmin(np.where(tied_best, first, np.iinfo(np.int64).max), axis=1)
        precision[k] = float(same[:, :k].mean())
        accuracy[k] = float((vote == query_codes).mean())
    return precision, accuracy


def knn_agreement(vectors: np.ndarray, labels: np.ndarray, sequences: Sequence[str], ids: Sequence[str],
                  kind: str | None, ks: Sequence[int] = (1, 5, 10), metric: str = "cosine",
                  sides: np.ndarray | None = None, name: str = "biotf embeddings",
                  invalid_smiles: str = "skip") -> AgreementReport:
    """The embeddings' row and the classical row (`kind`: a tokenizer kind, or None for none) on the same records;
    `invalid_smiles`: a SMILES RDKit cannot parse is left out ("skip", its id listed) or refused ("error")."""
    ks = sorted(set(ks))
    if not ks or ks[0] < 1:
        raise ConfigError("-k", ks, allowed="integers >= 1")
    labels = np.asarray(labels, str)
    usable = labels != ""
    left_out = {"records without a label": int((~usable).sum())}
    if sides is not None:
        unknown = sides == ""
        left_out["records not in the split file"] = int((usable & unknown).sum())
        usable &= ~unknown
    classical = None  # the classical 0/1 rows of every record (zeros where it has none)
    unparsable: list[str] = []
    if kind is not None:
        bits, has_features = classical_sets(kind, sequences, ids, invalid_smiles)
        if kind == "smiles":
            unparsable = [str(ids[i]) for i in np.flatnonzero(usable & ~has_features)]
        classical = np.zeros((len(labels), bits.shape[1]), np.float32)
        classical[has_features] = bits
        missing = "a Morgan fingerprint (RDKit cannot parse)" if kind == "smiles" else "k-mers"
        left_out[f"records without {missing}"] = int((usable & ~has_features).sum())
        usable &= has_features
    if sides is None:
        queries = references = np.flatnonzero(usable)
        scheme = "leave-one-out"
    else:
        queries = np.flatnonzero(usable & (sides == "test"))
        references = np.flatnonzero(usable & np.isin(sides, ["train", "validation"]))
        scheme = "test queries train + validation"
    if len(queries) == 0 or len(references) <= ks[-1]:
        raise InputError(f"{len(queries)} queries and {len(references)} references left ({scheme}): "
                         f"k = {ks[-1]} needs more than {ks[-1]} references")
    exclude = [[i] for i in range(len(queries))] if sides is None else None  # positions in `references`
    _, share = np.unique(labels[queries], return_counts=True)
    report = AgreementReport(ks, scheme, len(queries), len(references), len(np.unique(labels[usable])),
                             float(share.max() / share.sum()), left_out={k: v for k, v in left_out.items() if v},
                             unparsable=unparsable)
    candidates = [(f"{name}, {metric}", prepare(vectors, metric, ids, "embedding"), metric)]
    if classical is not None:
        candidates.append((describe(kind), classical, "jaccard"))
    for title, rows, row_metric in candidates:
        _, found = exact_search(rows[references], rows[queries], ks[-1], row_metric, exclude=exclude)
        report.rows.append(AgreementRow(title, *agreement(found, labels[queries], labels[references], ks)))
    return report


def evaluate_embeddings(path: str | Path, label: str, label_pattern: str | None, split: str | Path | None,
                        ks: Sequence[int], metric: str, array: str, classical: str,
                        invalid_smiles: str) -> list[str]:
    """`biotf search evaluate`: the kNN agreement of an embedding file's `array` with its `label` column (its
    `label_pattern`'s first group), leave-one-out or test against train + validation of `split`, beside the
    `classical` neighbour ("auto": the embeddings' tokenizer's, none for one without; or a kind, or "none"). Returns
    the lines it prints: what was evaluated, what was left out, the table."""
    table = read_embeddings(path)
    if array not in table.arrays:
        raise ConfigError(parameter("array"), array, allowed=", ".join(table.arrays))
    kind = table.info.get("tokenizer") if classical == "auto" else classical
    if classical == "auto" and kind not in KINDS:
        kind = None  # text and other kinds have no classical neighbour: the embeddings' row alone
    elif kind == "none":
        kind = None
    values = column_labels(table, label, label_pattern)
    sides = None if split is None else sides_of(split, table.ids)
    report = knn_agreement(table.arrays[array], values, table.sequences, table.ids, kind, ks, metric, sides,
                           name=f"biotf {array}, {table.info.get('pool')} pool", invalid_smiles=invalid_smiles)
    label = label + (f" ~ {label_pattern}" if label_pattern else "")
    return [f"{path}: label {label}, {report.n_classes} classes; {report.scheme}: {report.n_queries:,} queries, "
            f"{report.n_references:,} references; most frequent label {report.majority:.3f} of the queries",
            *left_out_lines("left out of every row: ", report.left_out, report.unparsable), report.table()]
