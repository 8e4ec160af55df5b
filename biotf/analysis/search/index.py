"""A search index: a directory beside the embeddings holding their vectors, ids and fingerprint, and (kind
"approx") an approximate nearest-neighbour index over them.

    build_index("proteins.h5ad", "proteins.index", kind="approx")
    index = SearchIndex.open("proteins.index")
    scores, rows = index.search(queries, k=10, metric="cosine")
    add_records("proteins.index", "more_proteins.h5ad")  # extends it, the approximate index too, no rebuild

Layout (no pickles anywhere; every file's CRC-32 is in index.json and checked on open: every file the index needs,
whatever index.json's CRC list holds, and a file without a CRC is refused):
- `index.json`: format, kind, metric, dim, record count, the embedding array used, the embedding files' metadata
  (`embedding_info`: model and tokenizer fingerprints, pool, layers, windows), the shards, the approximate
  index's file and settings, and the CRC-32 of every file;
- `vectors-<i>.npy` (float32, as in the embedding file) and `ids-<i>.json` (a JSON array of strings): one shard
  per embedding file added, so that adding never rewrites what is there;
- kind "approx": `approx-<records>.faiss`, a faiss HNSW graph (faiss's own file format) over the vectors (unit
  rows for cosine), written under a new name at each add; index.json, replaced atomically last, names the live
  one, so a killed add leaves the index as it was.

Why faiss HNSW (`IndexHNSWFlat`, M=32, efConstruction=100, efSearch 64 by default, raised to k when k is larger):
measured against faiss IVF-Flat, hnswlib and usearch on 200k x 256 clustered vectors (docs/benchmarks.md,
"Similarity search"), the three graph indexes reached the same recall@10 at about the same queries/s and faiss's
was the fastest to build; IVF-Flat built faster still, but its cells are fixed by k-means on the vectors it is built
from, so an index grown by `add` far beyond them slowly loses speed or recall, and a graph does not need that
training at all. The metric of an approximate index is fixed when it is built (`--metric`); an exact index
answers either.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from biotf.analysis.search import KINDS, METRICS
from biotf.analysis.search.neighbours import exact_search, prepare
from biotf.io.atomic import atomic_directory, atomic_write, atomic_write_text, save_array
from biotf.errors import ConfigError, InputError
from biotf.naming import given, parameter
from biotf.io.outputs import check_new_directory, hold
from biotf.io.embeddings import EmbeddingTable, read_embeddings
from biotf.progress import reporting
from biotf.untrusted import contained, file_crc32, read_json_object, read_text

FORMAT = 1
INDEX_FILE = "index.json"
HNSW_M, HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH = 32, 100, 64
HNSW_ADD_ROWS = 20_000  # records added to the HNSW graph per call: a progress line between calls
# Embedding metadata that must agree between the files of one index (and a query's model).
SAME_EMBEDDINGS = ("model_fingerprint", "tokenizer_fingerprint", "pool", "max_length", "long", "dim")


def _faiss():
    try:
        import faiss
    except ImportError:
        raise InputError(f"an approximate index needs faiss: pip install 'biotf[search]' "
                         f"(or {given('kind', 'exact')})") from None
    return faiss


def array_layer(info: dict[str, Any], array: str) -> int:
    """The hidden-state index the embedding file's `array` holds ("embeddings": the last of `layers`)."""
    layers = info.get("layers") or [None]
    return layers[-1] if array == "embeddings" else int(array.removeprefix("layer_"))


@dataclass
class _Shard:
    vectors: str
    ids: str
    rows: int


class SearchIndex:
    """An opened index directory: vectors, ids and (kind "approx") the faiss index, checked against index.json."""

    def __init__(self, directory: Path, meta: dict[str, Any], vectors: np.ndarray, ids: list[str], approx: Any):
        self.directory, self.meta, self.vectors, self.ids, self.approx = directory, meta, vectors, ids, approx
        self.row_of = {name: row for row, name in enumerate(ids)}
        self._prepared: dict[str, np.ndarray] = {}

    @property
    def kind(self) -> str:
        return self.meta["kind"]

    @property
    def info(self) -> dict[str, Any]:
        return self.meta["embedding_info"]

    @classmethod
    def open(cls, directory: str | Path) -> SearchIndex:
        """Read and check an index. An add that commits meanwhile removes the approximate index it replaced: a file
        gone while index.json changed is read again from the new index.json, not reported missing."""
        directory = Path(directory)
        while True:
            meta = read_meta(directory)
            try:
                return cls._read(directory, meta)
            except InputError:
                if read_meta(directory) == meta:
                    raise

    @classmethod
    def _read(cls, directory: Path, meta: dict[str, Any]) -> SearchIndex:
        crcs = meta["crc32"]
        for name in dict.fromkeys([*index_files(directory, meta), *crcs]):
            path = contained(directory, name, directory / INDEX_FILE, "file")
            if not path.is_file():
                raise InputError(f"search index {directory}: {name} is missing")
            if name not in crcs:
                raise InputError(f"search index {directory}: index.json has no CRC-32 of {name}, so it cannot be "
                                 "checked (index.json was edited or damaged; rebuild the index with biotf search build)")
            if file_crc32(path) != crcs[name]:
                raise InputError(f"search index {directory}: {name} is damaged (CRC-32 differs from index.json)")
        shards = [_Shard(**shard) for shard in meta["shards"]]
        vectors = np.concatenate([np.load(directory / s.vectors, allow_pickle=False) for s in shards])
        ids = [name for s in shards for name in _read_ids(directory / s.ids)]
        if len(ids) != len(vectors) or len(ids) != meta["records"]:
            raise InputError(f"search index {directory}: {len(ids)} ids and {len(vectors)} vectors, index.json says "
                             f"{meta['records']}")
        approx = None
        if meta["kind"] == "approx":
            faiss = _faiss()
            try:
                approx = faiss.read_index(str(directory / meta["approx"]["file"]))
            except RuntimeError as error:  # faiss's own "could not open": gone since checked, or unreadable
                raise InputError(f"search index {directory}: cannot read {meta['approx']['file']} ({error})") from None
            if approx.ntotal != len(ids):
                raise InputError(f"search index {directory}: the approximate index holds {approx.ntotal} vectors, "
                                 f"the shards {len(ids)}")
        return cls(directory, meta, vectors, ids, approx)

    def check_metric(self, metric: str) -> None:
        if metric not in METRICS:
            raise ConfigError(parameter("metric"), metric, allowed=" | ".join(METRICS))
        if self.kind == "approx" and metric != self.meta["metric"]:
            raise ConfigError(parameter("metric"), metric, allowed=self.meta["metric"],
                              reason=f"the approximate index {self.directory} was built for {self.meta['metric']} "
                                     f"(build another, or use {given('kind', 'exact')})")

    def prepared(self, metric: str) -> np.ndarray:
        """The stored vectors as `exact_search` compares them under `metric` (computed once)."""
        if metric not in self._prepared:
            self._prepared[metric] = prepare(self.vectors, metric, self.ids, "embedding")
        return self._prepared[metric]

    def search(self, queries: np.ndarray, k: int, metric: str, exclude: Sequence[Sequence[int]] | None = None,
               ef_search: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(scores, rows), each (len(queries), k), nearest first: rows -1 / scores NaN past the last neighbour.
        `queries` are raw vectors (scaled here for cosine); `exclude`: rows each query must not return;
        `ef_search`: the HNSW search breadth (default the index's): higher is slower and nearer to exact."""
        self.check_metric(metric)
        queries = prepare(queries, metric, what="query")
        if self.approx is None:
            return exact_search(self.prepared(metric), queries, k, metric, exclude)
        extra = max((len(rows) for rows in exclude), default=0) if exclude is not None else 0
        width = min(k + extra, len(self.ids))
        self.approx.hnsw.efSearch = max(ef_search or self.meta["approx"]["ef_search"], width)
        scores, rows = self.approx.search(queries, width)  # rows -1 where the graph found fewer
        out_scores = np.full((len(queries), k), np.nan, np.float32)
        out_rows = np.full((len(queries), k), -1, np.int64)
        if not extra:
            out_scores[:, :width], out_rows[:, :width] = np.where(rows >= 0, scores, np.nan), rows
        else:
            for query in range(len(queries)):
                banned = set(exclude[query])
                kept = [j for j in range(width) if rows[query, j] >= 0 and rows[query, j] not in banned][:k]
                out_rows[query, :len(kept)] = rows[query, kept]
                out_scores[query, :len(kept)] = scores[query, kept]
        if metric == "l2":  # faiss gives squared distances
            out_scores = np.sqrt(np.maximum(out_scores, 0), where=~np.isnan(out_scores), out=out_scores)
        return out_scores, out_rows


def _read_ids(path: Path) -> list[str]:
    try:
        ids = json.loads(read_text(path, "search index ids"))
    except (ValueError, RecursionError) as error:  # RecursionError: 200k nested "["
        raise InputError(f"cannot read search index ids {path}: not valid JSON ({error})") from None
    if not isinstance(ids, list) or not all(isinstance(name, str) for name in ids):
        raise InputError(f"cannot read search index ids {path}: expected a JSON array of strings")
    return ids


def read_meta(directory: Path) -> dict[str, Any]:
    if not (directory / INDEX_FILE).is_file():
        raise InputError(f"{directory} is not a search index (no {INDEX_FILE}; build one with biotf search build)")
    meta = read_json_object(directory / INDEX_FILE, "search index",
                            types={"kind": str, "metric": str, "records": int, "shards": list, "crc32": dict,
                                   "embedding_info": dict, "array": str},
                            required=("biotf_search_index", "kind", "metric", "records", "shards", "crc32",
                                      "embedding_info", "array"))
    if meta["biotf_search_index"] != FORMAT or meta["kind"] not in KINDS:
        raise InputError(f"search index {directory}: format {meta['biotf_search_index']!r} kind {meta['kind']!r} "
                         f"is not one this biotf reads (format {FORMAT}, kinds {', '.join(KINDS)})")
    return meta


def index_files(directory: Path, meta: dict[str, Any]) -> list[str]:
    """The files an index needs (every shard's vectors and ids; kind "approx": its faiss file), from index.json,
    whose structure is refused in one line where it is not what `_commit` writes."""
    where = f"search index {directory}: {INDEX_FILE}"
    for shard in meta["shards"]:
        if not (isinstance(shard, dict) and isinstance(shard.get("vectors"), str) and isinstance(shard.get("ids"), str)
                and type(shard.get("rows")) is int):
            raise InputError(f"{where}: a shard is {shard!r}, not {{\"vectors\": file, \"ids\": file, \"rows\": "
                             "count}} (index.json was edited or damaged; rebuild the index with biotf search build)")
    names = [name for shard in meta["shards"] for name in (shard["vectors"], shard["ids"])]
    if meta["kind"] == "approx":
        approx = meta.get("approx")
        if not (isinstance(approx, dict) and isinstance(approx.get("file"), str)
                and type(approx.get("ef_search")) is int):
            raise InputError(f"{where}: kind 'approx' but no approximate index (\"approx\": {approx!r}, expected its "
                             "\"file\" and \"ef_search\"); index.json was edited or damaged (rebuild the index, "
                             "or set \"kind\": \"exact\")")
        names.append(approx["file"])
    return names


def _embedding_rows(path: str | Path, array: str) -> tuple[EmbeddingTable, np.ndarray]:
    table = read_embeddings(path)
    if array not in table.arrays:
        raise ConfigError(parameter("array"), array, allowed=", ".join(table.arrays), reason=f"not in {path}")
    vectors = np.ascontiguousarray(table.arrays[array], np.float32)
    seen: dict[str, int] = {}
    for position, name in enumerate(table.ids):
        if seen.setdefault(str(name), position) != position:
            raise InputError(f"{path}: id {str(name)!r} appears twice (records {seen[str(name)]} and {position}); "
                             "an index needs unique ids")
    return table, vectors


def _check_same(index_info: dict[str, Any], info: dict[str, Any], array: str, index_array: str, source: str) -> None:
    """Refuse embeddings that do not come from the same model, tokenizer, pooling and layer as the index's."""
    for key in SAME_EMBEDDINGS:
        if index_info.get(key) != info.get(key):
            raise InputError(f"{source}: {key} {info.get(key)!r} differs from the index's {index_info.get(key)!r}; "
                             "an index holds vectors of one model, tokenizer, pooling and layer")
    if array_layer(index_info, index_array) != array_layer(info, array):
        raise InputError(f"{source}: layer {array_layer(info, array)} differs from the index's "
                         f"{array_layer(index_info, index_array)}")


def _write_shard(directory: Path, number: int, vectors: np.ndarray, ids: list[str]) -> dict[str, Any]:
    shard = {"vectors": f"vectors-{number}.npy", "ids": f"ids-{number}.json", "rows": len(ids)}

    def save(temporary: Path) -> None:
        with open(temporary, "wb") as handle:  # a handle: np.save would add ".npy" to the temporary's name
            save_array(handle, vectors)

    atomic_write(directory / shard["vectors"], save)
    atomic_write_text(directory / shard["ids"], json.dumps(ids, ensure_ascii=False))
    return shard


def _write_approx(directory: Path, approx: Any, records: int) -> str:
    name = f"approx-{records}.faiss"
    atomic_write(directory / name, lambda temporary: _faiss().write_index(approx, str(temporary)))
    return name


def _approx_rows(vectors: np.ndarray, metric: str, ids: Sequence[str]) -> np.ndarray:
    return prepare(vectors, metric, ids, "embedding")


def build_index(embeddings: str | Path, directory: str | Path, kind: str = "exact", metric: str = "cosine",
                array: str = "embeddings", progress: bool = False) -> dict[str, Any]:
    """Write a new index directory over an embedding file; returns its index.json content."""
    table, vectors = _embedding_rows(embeddings, array)
    return build_from_arrays(directory, vectors, [str(name) for name in table.ids], table.info, kind, metric, array,
                             [str(embeddings)], progress)


def build_from_arrays(directory: str | Path, vectors: np.ndarray, ids: list[str], info: dict[str, Any],
                      kind: str = "exact", metric: str = "cosine", array: str = "embeddings",
                      sources: Sequence[str] = (), progress: bool = False) -> dict[str, Any]:
    """`build_index` of vectors in memory (unique `ids`; `info`: the embedding file's metadata); `progress`: the
    approximate index's records added, on stderr (`biotf.progress`), HNSW_ADD_ROWS at a time."""
    if kind not in KINDS:
        raise ConfigError(parameter("kind"), kind, allowed=" | ".join(KINDS))
    if metric not in METRICS:
        raise ConfigError(parameter("metric"), metric, allowed=" | ".join(METRICS))
    directory = Path(directory)
    with hold(directory, parameter("directory")):  # another build into the same directory is refused, an add waits for it
        return _build(directory, vectors, ids, info, kind, metric, array, sources, progress)


def _build(directory: Path, vectors: np.ndarray, ids: list[str], info: dict[str, Any], kind: str, metric: str,
           array: str, sources: Sequence[str], progress: bool) -> dict[str, Any]:
    check_new_directory(directory)
    prepared = _approx_rows(vectors, metric, ids)  # refuses zero / non-finite rows for either kind
    with atomic_directory(directory) as staging:  # a failed build (a full disk) leaves no partial index
        meta: dict[str, Any] = {"biotf_search_index": FORMAT, "kind": kind, "metric": metric,
                                "dim": vectors.shape[1], "records": len(ids), "array": array, "embedding_info": info,
                                "sources": list(sources), "shards": [_write_shard(staging, 0, vectors, ids)]}
        if kind == "approx":
            faiss = _faiss()
            approx = faiss.IndexHNSWFlat(vectors.shape[1], HNSW_M,
                                         faiss.METRIC_INNER_PRODUCT if metric == "cosine" else faiss.METRIC_L2)
            approx.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
            with reporting(progress, f"indexing {directory.name}", "records", total=len(prepared)) as shown:
                for start in range(0, len(prepared), HNSW_ADD_ROWS):
                    approx.add(prepared[start:start + HNSW_ADD_ROWS])
                    if shown is not None:
                        shown.update(len(prepared[start:start + HNSW_ADD_ROWS]))
            meta["approx"] = {"library": "faiss", "version": faiss.__version__, "type": "IndexHNSWFlat", "M": HNSW_M,
                              "ef_construction": HNSW_EF_CONSTRUCTION, "ef_search": HNSW_EF_SEARCH,
                              "file": _write_approx(staging, approx, len(ids))}
        _commit(staging, meta)
    return meta


def _commit(directory: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """index.json with the CRC-32 of every file it names, written atomically: the index's one moment of change."""
    meta["crc32"] = {name: file_crc32(directory / name) for name in index_files(directory, meta)}
    atomic_write_text(directory / INDEX_FILE, json.dumps(meta, indent=1, ensure_ascii=False))
    for stale in directory.glob("approx-*.faiss"):  # the approximate index an add replaced
        if stale.name not in meta["crc32"]:
            os.unlink(stale)
    return meta


def add_records(directory: str | Path, embeddings: str | Path, array: str | None = None,
                waiting: Callable[[], None] = lambda: None) -> tuple[dict[str, Any], int]:
    """Extend an index with the records of another embedding file (same model, tokenizer, pooling and layer; ids new
    to the index): a new shard, and the approximate index grown in place, not rebuilt. Returns (index.json, added).

    The index is held for the whole add: a second add (or a build) on it meanwhile waits its turn, after calling
    `waiting()` to say so, then adds to what the first one wrote (two adds of 30 records to 200: 260, not 230)."""
    with hold(Path(directory), parameter("directory"), waiting=waiting):
        return _add(directory, embeddings, array)


def _add(directory: str | Path, embeddings: str | Path, array: str | None) -> tuple[dict[str, Any], int]:
    index = SearchIndex.open(directory)
    array = array or index.meta["array"]
    table, vectors = _embedding_rows(embeddings, array)
    _check_same(index.info, table.info, array, index.meta["array"], str(embeddings))
    ids = [str(name) for name in table.ids]
    clash = next((name for name in ids if name in index.row_of), None)
    if clash is not None:
        raise InputError(f"{embeddings}: id {clash!r} is already in the index {directory} (ids must stay unique; "
                         f"{sum(name in index.row_of for name in ids)} of {len(ids)} clash)")
    prepared = _approx_rows(vectors, index.meta["metric"], ids)
    meta = dict(index.meta)
    meta["shards"] = [*meta["shards"], _write_shard(index.directory, len(meta["shards"]), vectors, ids)]
    meta["records"] += len(ids)
    meta["sources"] = [*meta.get("sources", []), str(embeddings)]
    if index.approx is not None:
        index.approx.add(prepared)
        meta["approx"] = {**meta["approx"], "file": _write_approx(index.directory, index.approx, meta["records"])}
    return _commit(index.directory, meta), len(ids)
