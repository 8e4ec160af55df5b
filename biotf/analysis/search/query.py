"""Queries of a search index, in the three forms `biotf search query` takes, and their hits in query order.

- records of a sequence file, embedded by the index's model exactly as `biotf embed` embedded the index
  (`biotf.export.embed_job.open_embedder`, with the index's pooling, layer, windows and tokenizer options); a model
  or tokenizer whose fingerprint differs from the index's is refused before anything is embedded;
- ids of the index: each record's neighbours, itself left out;
- vector expressions of ids (`biotf.analysis.search.expression`), their own ids left out.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from biotf.analysis.search.expression import expression_vector
from biotf.analysis.search.index import SearchIndex, array_layer
from biotf.checkpoint.loading import LoadedModel
from biotf.io.readers import ReaderOptions, read_records
from biotf.errors import ConfigError, InputError
from biotf.export.embed import EmbedOptions, EmbedStats
from biotf.io.outputs import output_format
from biotf.naming import given, parameter, parameters
from biotf.io.tables import TABLE_FORMATS, write_table

HIT_COLUMNS = ("query", "rank", "id", "score")


@dataclass
class Queries:
    names: list[str]
    vectors: np.ndarray  # (queries, D), raw
    exclude: list[list[int]] = field(default_factory=list)  # index rows each query must not return


def id_queries(index: SearchIndex, ids: Sequence[str]) -> Queries:
    missing = next((name for name in ids if name not in index.row_of), None)
    if missing is not None:
        raise InputError(f"{parameter('ids')}: unknown id {missing!r} (not in the index {index.directory})")
    rows = [index.row_of[name] for name in ids]
    return Queries(list(ids), index.vectors[rows], [[row] for row in rows])


def expression_queries(index: SearchIndex, texts: Sequence[str], metric: str) -> Queries:
    built = [expression_vector(text, index.row_of.get, index.vectors, unit=metric == "cosine") for text in texts]
    return Queries(list(texts), np.stack([vector for vector, _ in built]), [rows for _, rows in built])


def sequence_queries(index: SearchIndex, model: str | Path | LoadedModel, input_path: str | Path,
                     reader_options: ReaderOptions = ReaderOptions(), device: str | None = None,
                     batch_tokens: int = 16384) -> tuple[Queries, EmbedStats]:
    """The records of `input_path`, embedded as the index's vectors were by `model` (loaded, or its source:
    `as_loaded`), in the precision they were computed in; refused when the model or its precision differs."""
    from biotf.export.embed_job import open_embedder

    info = index.info
    if not info.get("model_fingerprint"):
        raise InputError(f"the index {index.directory} was built from embeddings without a model fingerprint (written "
                         f"by an older biotf embed): re-embed them with this biotf to query by sequence "
                         f"({parameter('ids')} and {parameter('expressions')} work)")
    options = EmbedOptions(pool=info["pool"], layer=array_layer(info, index.meta["array"]), batch_tokens=batch_tokens,
                           max_length=info.get("max_length"), long=info.get("long", "chunk"),
                           overlap=info.get("overlap"), pool_specials=info.get("pool_specials", False),
                           normalize=info.get("normalize", False))
    embedder, query_info = open_embedder(model, options, device, info.get("tokenizer_options") or {})
    stored = info.get("precision", "fp32")  # a model in another precision has another fingerprint: say which
    if query_info["precision"] != stored:
        raise InputError(f"{parameter('model')} {query_info['model']}: the index holds embeddings computed in "
                         f"{stored}, the queries would be computed in {query_info['precision']}: load the model as "
                         f"they were ({given('precision', stored)})")
    for key, what in (("model_fingerprint", "model"), ("tokenizer_fingerprint", "tokenizer")):
        if query_info[key] != info.get(key):
            raise InputError(f"{parameter('model')} {query_info['model']}: its {what} fingerprint {query_info[key]} differs from the index's "
                             f"{info.get(key)} (the index holds embeddings of {info.get('model')}): queries must be "
                             "embedded by the same model and tokenizer")
    stats = EmbedStats()
    names, vectors = [], []
    for item in embedder.embed(read_records(input_path, reader_options, stats.policies), stats, input_path):
        names.append(item.record.id)
        vectors.append(item.vectors[-1])
    if not names:
        raise InputError(f"{input_path}: no records to query with")
    return Queries(names, np.stack(vectors).astype(np.float32), [[] for _ in names]), stats


def hits(index: SearchIndex, queries: Queries, k: int, metric: str,
         ef_search: int | None = None) -> Iterator[dict[str, object]]:
    """Rows (query, rank, id, score) in query order, nearest first (rank 1)."""
    scores, rows = index.search(queries.vectors, k, metric, queries.exclude or None, ef_search)
    for name, query_scores, query_rows in zip(queries.names, scores, rows):
        for rank, (score, row) in enumerate(zip(query_scores, query_rows), 1):
            if row >= 0:
                yield {"query": name, "rank": rank, "id": index.ids[row], "score": float(score)}


def check_query(ids: Sequence[str] | None, expressions: Sequence[str] | None, input_path: Path | None,
                model: str | None, k: int, ef_search: int | None, output: Path) -> None:
    """Refuse anything but exactly one query form (`model` with `input_path` alone), a bad `k` or `ef_search`, or an
    output extension no table has, before anything is read."""
    forms = [parameter(name) for name, value in (("ids", ids), ("expressions", expressions),
                                                 ("input_path", input_path)) if value is not None]
    if len(forms) != 1:
        raise ConfigError(parameters("ids", "expressions", "input_path"), " and ".join(forms) or "none",
                          reason="give exactly one query form",
                          allowed=f"{parameter('ids')}, {parameter('expressions')} or {parameter('input_path')}")
    if input_path is not None and model is None:
        raise ConfigError(parameter("model"), None, required_with=parameter("input_path"))
    if input_path is None and model is not None:
        raise ConfigError(parameter("model"), model,
                          reason=f"only sequence queries ({parameter('input_path')}) are embedded")
    if k < 1:
        raise ConfigError(parameter("k"), k, allowed="an integer >= 1")
    if ef_search is not None and ef_search < 1:
        raise ConfigError(parameter("ef_search"), ef_search, allowed="an integer >= 1")
    output_format(output, TABLE_FORMATS)


def query_file(index_directory: str | Path, output: str | Path, k: int, metric: str | None, ef_search: int | None,
               ids: Sequence[str] | None = None, expressions: Sequence[str] | None = None,
               input_path: str | Path | None = None, reader_options: ReaderOptions = ReaderOptions(),
               load_model: Callable[[], LoadedModel] | None = None) -> str:
    """`biotf search query`: the hits of the one query form given (`check_query`; `load_model` gives the model
    that embeds the records of `input_path`) in the index, written to `output` (.tsv, .csv or .parquet) all or
    nothing. Returns the summary line."""
    index = SearchIndex.open(index_directory)
    metric = metric or index.meta["metric"]
    index.check_metric(metric)
    summary = ""
    if ids:
        queries = id_queries(index, ids)
    elif expressions:
        queries = expression_queries(index, expressions, metric)
    else:
        queries, stats = sequence_queries(index, load_model(), input_path, reader_options)
        summary = f" ({stats.summary()})"
    rows = list(hits(index, queries, k, metric, ef_search))
    write_table(output, rows, HIT_COLUMNS)
    return (f"{len(queries.names):,} quer{'y' if len(queries.names) == 1 else 'ies'}{summary} -> {output}: "
            f"{len(rows):,} hits, {index.kind} {metric} search of {len(index.ids):,} records")
