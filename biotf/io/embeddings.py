"""Embedding files: .npz (numpy), .parquet (pandas / pyarrow) and .h5ad (AnnData / scanpy), and reading them back.

While records stream in, vectors go to raw spool files in a hidden directory beside the output, and
sequences and metadata to a JSON-lines spool; only ids and (per token) record lengths stay in memory,
tens of bytes a record. `close()` assembles the chosen format from the spools a chunk of rows at a time
(.h5ad's obs too, written with h5py in AnnData's layout), under a temporary name renamed into place at
the end, so memory stays bounded and a failed run leaves nothing under the output name.

Layout, every format (N records, D dimensions):
- ids, the input sequences and every metadata column, as strings exactly as read;
- `embeddings` (N, D): the requested layer; with `--layer all` the last, and `layer_<i>` for the others;
- `info`: JSON with the model, the precision it computed in and its fingerprint (`checkpoint.loading.model_identity`;
  files written before them lack the keys), the tokenizer and its fingerprint, pooling, layer and the counts of
  chunked / truncated records.
  .npz: `embeddings`, `layer_<i>`, `info` (a JSON string), and each text column (`ids`, `sequences`,
  `metadata/<column>`) as numpy's own fixed-width string array (`data["ids"]`) when that is compact: when its
  longest string is at most 4 x the column's mean length + 16 characters (ids, labels, equal-length DNA windows).
  A column of very unequal lengths (proteins) is two arrays instead, `<name>.utf8` (uint8: every string's UTF-8
  bytes back to back) and `<name>.offsets` (int64, N + 1: string i is bytes offsets[i]:offsets[i+1]), because a
  fixed width costs 4 bytes x the longest string for every row. No pickles either way (`np.load` needs no
  allow_pickle); `npz_text(np.load(path), name)` gives the strings of either layout. A metadata column whose
  array names could be read as another's is refused in one line (`NpzNames`; e.g. `x` and `x.npy`).
  .parquet: one row per record, columns `id`, `sequence`, metadata, `embeddings`, `layer_<i>` (fixed-size
  float32 lists); `info` in the schema metadata under b"biotf".
  .h5ad: `obs` = id (index), sequence, metadata; `X` = embeddings; `obsm["layer_<i>"]`; `uns["biotf"]` = info.
Pool "none" (per-token vectors): rows are tokens, T in all. .npz keeps ids/sequences/metadata per record plus
`offsets` (N + 1; record i's tokens are rows offsets[i]:offsets[i+1]), `record_index`, `position` (0-based
among the record's content tokens) and `token_id` per row; .parquet and .h5ad have one row per token with
columns `id`, `record_index`, `position`, `token_id`.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import zipfile
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from biotf.io.atomic import atomic_write, close_quietly
from biotf.errors import InputError
from biotf.io.npz import NpzNames
from biotf.io.outputs import LOCK_FILE, SPOOL_SUFFIX, lock, output_format, work_prefix
from biotf.io.readers import Record
from biotf.untrusted import parse_json_object, read_json_object
from biotf.naming import given, parameter

EMBEDDING_FORMATS = (".npz", ".parquet", ".h5ad")  # output files, by extension (`WRITERS` implements them)
TOKEN_COLUMNS = ("record_index", "position", "token_id")
RESERVED = {"id", "sequence", "embeddings", *TOKEN_COLUMNS}
CHUNK_ROWS = 8192
PART_STATE = "state.json"  # what a kept part's spools hold (`EmbeddingWriter.keep`)




@dataclass
class RecordEmbedding:
    """One record's vectors: (layers, D) pooled, or (layers, tokens, D) with `token_ids` and `positions` for
    pool "none" (content tokens only; `positions` are 0-based indices among the record's content tokens)."""

    record: Record
    vectors: np.ndarray
    token_ids: np.ndarray | None = None
    positions: np.ndarray | None = None


class _Spool:
    """One growing array on disk: rows of a fixed dtype and trailing shape, appended in order."""

    def __init__(self, path: Path, dtype: np.dtype, shape: tuple[int, ...]):
        self.path, self.dtype, self.shape, self.rows = path, np.dtype(dtype), shape, 0
        self.handle: BinaryIO = open(path, "wb")

    def append(self, rows: np.ndarray) -> None:
        self.handle.write(np.ascontiguousarray(rows, self.dtype).tobytes())
        self.rows += len(rows)

    def chunks(self) -> Iterator[np.ndarray]:
        """The rows, CHUNK_ROWS at a time."""
        self.handle.flush()
        return _row_chunks(self.path, self.dtype, self.shape, self.rows)


def _row_chunks(path: Path, dtype: np.dtype, shape: tuple[int, ...], rows: int) -> Iterator[np.ndarray]:
    """`rows` rows of a spool file, CHUNK_ROWS at a time."""
    row_bytes = dtype.itemsize * int(np.prod(shape))
    with open(path, "rb") as handle:
        for start in range(0, rows, CHUNK_ROWS):
            count = min(CHUNK_ROWS, rows - start)
            yield np.frombuffer(handle.read(count * row_bytes), dtype).reshape(count, *shape)


class EmbeddingWriter:
    """Collects `RecordEmbedding`s in order and writes one embedding file; use as a context manager so that
    an error removes the spools and leaves no output behind."""

    def __init__(self, path: str | Path, array_names: list[str], per_token: bool, info: dict[str, Any],
                 spool_dir: Path | None = None):
        """`spool_dir`: an existing empty directory to spool into (a part of a sharded run, which `keep` leaves
        there); by default a hidden one beside `path`, removed when the file is written."""
        self.path, self.format = Path(path), output_format(path, EMBEDDING_FORMATS)
        self.array_names, self.per_token, self.info = array_names, per_token, info
        self.ids: list[str] = []
        self.lengths = array("q")  # per-token: content tokens of each record
        self.sizes: dict[str, int] = {"sequence": 0}  # UTF-8 bytes per text column (the .npz entry's length)
        self.widths: dict[str, int] = {"sequence": 0}  # characters of the longest string per text column
        if spool_dir is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            spool_dir = Path(tempfile.mkdtemp(prefix=work_prefix(self.path), suffix=SPOOL_SUFFIX, dir=self.path.parent))
        self.spool_dir = spool_dir
        self.spools: dict[str, _Spool] = {}
        self.npz_names = NpzNames("rename one column in the input, or write .parquet or .h5ad")
        self.text = open(self.spool_dir / LOCK_FILE, "w", encoding="utf-8")  # [sequence, metadata] per line
        lock(self.text)  # held while this run lives: `remove_leftovers` of a later run leaves it alone

    def _spool(self, name: str, rows: np.ndarray) -> None:
        if name not in self.spools:
            self.spools[name] = _Spool(self.spool_dir / name, rows.dtype, rows.shape[1:])
        self.spools[name].append(rows)

    def add(self, item: RecordEmbedding) -> None:
        record = item.record
        clash = RESERVED.intersection(record.metadata)
        if clash:
            raise InputError(f"record {record.id!r}: metadata column {sorted(clash)[0]!r} clashes with an output "
                             f"column (reserved: {', '.join(sorted(RESERVED))}); rename it in the input")
        self.ids.append(record.id)
        self.text.write(json.dumps([record.sequence, record.metadata], ensure_ascii=False) + "\n")
        for column, text in (("sequence", record.sequence), *record.metadata.items()):
            self._claim(column)
            self.sizes[column] = self.sizes.get(column, 0) + utf8_size(text)
            self.widths[column] = max(self.widths.get(column, 0), len(text))
        vectors = item.vectors if self.per_token else item.vectors[:, None]  # (layers, rows, D)
        for name, layer in zip(self.array_names, vectors):
            self._spool(name, layer)
        if self.per_token:
            self.lengths.append(len(item.positions))
            self._spool("record_index", np.full(len(item.positions), len(self.ids) - 1, np.int64))
            self._spool("position", item.positions)
            self._spool("token_id", item.token_ids)

    def _claim(self, column: str) -> None:
        """A metadata column's .npz names, claimed when it first appears (`NpzNames`): `metadata/<column>`, the
        two arrays a long column becomes, and for a name that looks like one of those, the column it would read as."""
        if self.format != ".npz" or column in self.sizes:
            return
        name = f"metadata/{column}"
        looks_like = [name.rpartition(".")[0]] if name.endswith((".utf8", ".offsets")) else []
        self.npz_names.add(f"metadata column {column!r}", name, f"{name}.utf8", f"{name}.offsets", *looks_like)

    def columns(self) -> list[str]:
        """Metadata column names in order of first appearance (records lacking one get "")."""
        return [column for column in self.sizes if column != "sequence"]

    def text_chunks(self, columns: Sequence[str]) -> Iterator[list[list[str]]]:
        """Text columns ("sequence" and metadata columns), CHUNK_ROWS records at a time, one list per column:
        one pass over the spool, however many columns are read together."""
        self.text.flush()
        with open(self.text.name, encoding="utf-8") as handle:
            while lines := list(islice(handle, CHUNK_ROWS)):
                rows = [json.loads(line) for line in lines]
                yield [[row[0] for row in rows] if column == "sequence" else [row[1].get(column, "") for row in rows]
                       for column in columns]

    def text_column(self, column: str) -> Iterator[list[str]]:
        """One text column, CHUNK_ROWS records at a time (formats that write a column whole, one after another)."""
        return (chunk for (chunk,) in self.text_chunks([column]))

    def offsets(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.lengths, dtype=np.int64)])

    def close(self) -> Path:
        """Write the file (temporary name, then rename) and remove the spools."""
        try:
            if not self.ids:
                raise InputError(f"no records to write to {self.path}")
            self.info = {**self.info, "records": len(self.ids)}
            return atomic_write(self.path, lambda temporary: WRITERS[self.format](temporary, self))
        finally:
            self.abort()

    def abort(self) -> None:
        """Remove the spools, also when the disk filled up: their last flush may fail, their removal must not."""
        close_quietly(self._handles())
        shutil.rmtree(self.spool_dir, ignore_errors=True)

    def _handles(self) -> list[BinaryIO]:
        return [self.text, *(spool.handle for spool in self.spools.values())]

    def _close_spools(self) -> None:
        for handle in self._handles():
            handle.close()

    # --- parts of a sharded run (biotf.data.sharded) ------------------------------------------------------
    def keep(self) -> None:
        """Leave the spools in `spool_dir` with what `extend` needs to append them to another writer (`state.json`:
        ids, per-token lengths, text sizes and widths, each spool's dtype, shape and rows) instead of writing a file."""
        self._close_spools()
        spools = {name: [spool.dtype.str, list(spool.shape), spool.rows] for name, spool in self.spools.items()}
        state = {"ids": self.ids, "lengths": self.lengths.tolist(), "sizes": self.sizes, "widths": self.widths,
                 "spools": spools}
        (self.spool_dir / PART_STATE).write_text(json.dumps(state), encoding="utf-8")

    def extend(self, part: Path) -> None:
        """Append the records a writer `keep`s in directory `part`, as if they had been `add`ed here one by one
        (per-token record indices shifted by the records already here), copying the spools' bytes."""
        state = read_json_object(part / PART_STATE, "embedding part state")
        offset = len(self.ids)
        self.ids.extend(state["ids"])
        self.lengths.extend(state["lengths"])
        for column, size in state["sizes"].items():
            self._claim(column)
            self.sizes[column] = self.sizes.get(column, 0) + size
            self.widths[column] = max(self.widths.get(column, 0), state["widths"][column])
        with open(part / LOCK_FILE, encoding="utf-8") as handle:
            shutil.copyfileobj(handle, self.text)
        for name, (dtype, shape, rows) in state["spools"].items():
            if name not in self.spools:
                self.spools[name] = _Spool(self.spool_dir / name, np.dtype(dtype), tuple(shape))
            spool = self.spools[name]
            if name == "record_index":
                for chunk in _row_chunks(part / name, np.dtype(dtype), tuple(shape), rows):
                    spool.append(chunk + offset)
            else:
                with open(part / name, "rb") as handle:
                    shutil.copyfileobj(handle, spool.handle)
                spool.rows += rows

    def __enter__(self) -> EmbeddingWriter:
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if kind is not None:
            self.abort()


# --- formats ------------------------------------------------------------------------------------
def _chunks(rows: list[Any]) -> Iterator[list[Any]]:
    """An in-memory list (ids) cut like the spools, CHUNK_ROWS at a time."""
    return (rows[start:start + CHUNK_ROWS] for start in range(0, len(rows), CHUNK_ROWS))


def _npz_entry(archive: zipfile.ZipFile, name: str, dtype: np.dtype, shape: tuple[int, ...],
               chunks: Iterable[np.ndarray]) -> None:
    """An .npy entry written chunk by chunk: header, then the raw rows, never the whole array in memory."""
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": shape}
    with archive.open(f"{name}.npy", "w", force_zip64=True) as handle:
        np.lib.format.write_array_header_2_0(handle, header)
        for chunk in chunks:
            handle.write(np.ascontiguousarray(chunk, dtype).tobytes())


def utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _npz_text(archive: zipfile.ZipFile, name: str, rows: int, size: int, chunks: Iterable[list[str]]) -> None:
    """Text column `name` as `<name>.utf8` (the strings' UTF-8 bytes back to back, `size` in all) and
    `<name>.offsets` (N + 1 byte offsets, built while the bytes stream: 8 bytes a record, one column at a time)."""
    lengths = array("q", [0])

    def encoded() -> Iterator[np.ndarray]:
        for chunk in chunks:
            pieces = [text.encode("utf-8") for text in chunk]
            lengths.extend(map(len, pieces))
            yield np.frombuffer(b"".join(pieces), np.uint8)

    _npz_entry(archive, f"{name}.utf8", np.uint8, (size,), encoded())
    offsets = np.cumsum(lengths, dtype=np.int64)
    if len(offsets) != rows + 1 or offsets[-1] != size:  # the header above promised `size` bytes
        raise RuntimeError(f"text column {name}: {offsets[-1]} bytes in {len(offsets) - 1} rows, expected {size} in {rows}")
    _npz_entry(archive, f"{name}.offsets", np.int64, (rows + 1,), [offsets])


def fixed_width_is_compact(rows: int, size: int, width: int) -> bool:
    """Whether a text column of `rows` strings, `size` UTF-8 bytes in all and `width` characters at the longest,
    is stored as a plain fixed-width string array (the rule in the module docstring)."""
    return width <= 4 * size / max(rows, 1) + 16


def write_npz(path: Path, writer: EmbeddingWriter) -> None:
    rows = len(writer.ids)
    texts = {"ids": (sum(map(utf8_size, writer.ids)), max(map(len, writer.ids)), _chunks(writer.ids)),
             "sequences": (writer.sizes["sequence"], writer.widths["sequence"], writer.text_column("sequence")),
             **{f"metadata/{c}": (writer.sizes[c], writer.widths[c], writer.text_column(c)) for c in writer.columns()}}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, (size, width, chunks) in texts.items():
            if fixed_width_is_compact(rows, size, width):
                _npz_entry(archive, name, np.dtype(f"<U{max(width, 1)}"), (rows,), chunks)
            else:
                _npz_text(archive, name, rows, size, chunks)
        info = np.array(json.dumps(writer.info))
        _npz_entry(archive, "info", info.dtype, (), [info])
        if writer.per_token:
            _npz_entry(archive, "offsets", np.int64, (rows + 1,), [writer.offsets()])
        for name, spool in writer.spools.items():
            _npz_entry(archive, name, spool.dtype, (spool.rows, *spool.shape), spool.chunks())


def npz_text(data: Mapping[str, np.ndarray], name: str) -> np.ndarray:
    """The strings of text column `name` ("ids", "sequences" or "metadata/<column>") of an .npz from
    `biotf embed`, as an object array:  `sequences = npz_text(np.load("e.npz"), "sequences")`, whichever of the
    two layouts the column has (a plain fixed-width array, or `<name>.utf8` + `<name>.offsets`)."""
    if name in getattr(data, "files", data):
        return np.asarray(data[name]).astype(object)
    if f"{name}.utf8" not in getattr(data, "files", data):
        raise KeyError(f"no text column {name!r} in this file")
    blob, offsets = data[f"{name}.utf8"].tobytes(), data[f"{name}.offsets"].tolist()
    return np.array([blob[a:b].decode("utf-8") for a, b in zip(offsets[:-1], offsets[1:])], dtype=object)


def _row_tables(writer: EmbeddingWriter) -> Iterator[dict[str, Any]]:
    """Per chunk of rows: the plain columns (ids, metadata or token columns) and the vector arrays."""
    names = list(writer.spools)
    vectors = zip(*(writer.spools[n].chunks() for n in names))
    if writer.per_token:
        ids = np.array(writer.ids, dtype=object)
        for arrays in vectors:
            chunk = dict(zip(names, arrays))
            yield {"plain": {"id": ids[chunk["record_index"]], **{c: chunk.pop(c) for c in TOKEN_COLUMNS}},
                   "vectors": chunk}
        return
    columns = writer.columns()
    texts = zip(_chunks(writer.ids), writer.text_chunks(["sequence", *columns]))
    for arrays, (ids, text) in zip(vectors, texts):
        yield {"plain": dict(zip(["id", "sequence", *columns], [ids, *text])), "vectors": dict(zip(names, arrays))}


def write_parquet(path: Path, writer: EmbeddingWriter) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = None
    try:
        for table in _row_tables(writer):
            columns = {name: pa.array(values) for name, values in table["plain"].items()}
            for name, vectors in table["vectors"].items():
                columns[name] = pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), vectors.shape[1])
            batch = pa.table(columns)
            if parquet is None:
                schema = batch.schema.with_metadata({b"biotf": json.dumps(writer.info).encode()})
                parquet = pq.ParquetWriter(path, schema)
            parquet.write_table(batch.replace_schema_metadata(schema.metadata))
    finally:
        if parquet is not None:
            parquet.close()


def _h5_stream(group: Any, where: str, encoding: str, dtype: Any, shape: tuple[int, ...],
               chunks: Iterable[Any]) -> None:
    """One h5py dataset of `group` filled chunk by chunk, with the encoding attributes anndata's `write_elem`
    gives it ("array" for numbers, "string-array" for text)."""
    dataset = group.create_dataset(where, shape=shape, dtype=dtype,
                                   chunks=(min(CHUNK_ROWS, max(shape[0], 1)), *shape[1:]))
    dataset.attrs.update({"encoding-type": encoding, "encoding-version": "0.2.0"})
    start = 0
    for chunk in chunks:
        dataset[start:start + len(chunk)] = np.asarray(chunk, dtype=object) if encoding == "string-array" else chunk
        start += len(chunk)


def _per_token_obs(writer: EmbeddingWriter) -> dict[str, Iterator[Any]]:
    """obs columns of a per-token file, one chunk of token rows at a time: index "<id>/<position>", id, and the
    token columns."""
    ids = np.array(writer.ids, dtype=object)
    streams = {c: writer.spools[c].chunks() for c in TOKEN_COLUMNS}
    index = ([f"{i}/{p}" for i, p in zip(ids[r], q)] for r, q in zip(writer.spools["record_index"].chunks(),
                                                                     writer.spools["position"].chunks()))
    return {"_index": index, "id": (ids[r] for r in writer.spools["record_index"].chunks()), **streams}


def write_h5ad(path: Path, writer: EmbeddingWriter) -> None:
    """AnnData's on-disk layout written piecewise: var/uns by anndata's own `write_elem`; obs, X and obsm
    streamed from the spools into h5py datasets carrying the encoding attributes anndata writes."""
    import h5py
    import pandas as pd
    from anndata.io import write_elem

    if writer.per_token:
        rows, index, obs = writer.spools["record_index"].rows, "_index", _per_token_obs(writer)
    else:
        rows, index = len(writer.ids), "id"
        obs = {"id": _chunks(writer.ids), **{c: writer.text_column(c) for c in ["sequence", *writer.columns()]}}
    dim = writer.spools["embeddings"].shape[0]
    with h5py.File(path, "w") as handle:
        handle.attrs.update({"encoding-type": "anndata", "encoding-version": "0.1.0"})
        frame = handle.create_group("obs")
        frame.attrs.update({"_index": index, "column-order": np.array([c for c in obs if c != index], dtype=object),
                            "encoding-type": "dataframe", "encoding-version": "0.2.0"})
        for column, chunks in obs.items():
            if column in TOKEN_COLUMNS:
                _h5_stream(frame, column, "array", writer.spools[column].dtype, (rows,), chunks)
            else:
                _h5_stream(frame, column, "string-array", h5py.string_dtype(), (rows,), chunks)
        write_elem(handle, "var", pd.DataFrame(index=[f"dim_{i}" for i in range(dim)]))
        write_elem(handle, "uns", {"biotf": json.dumps(writer.info),
                                   **({"offsets": writer.offsets()} if writer.per_token else {})})
        for group in ("obsm", "varm", "layers", "obsp", "varp"):
            write_elem(handle, group, {})
        for name in (n for n in writer.spools if n not in TOKEN_COLUMNS):
            spool = writer.spools[name]
            _h5_stream(handle, "X" if name == "embeddings" else f"obsm/{name}", "array", spool.dtype,
                       (spool.rows, *spool.shape), spool.chunks())


WRITERS: dict[str, Callable[[Path, EmbeddingWriter], None]] = {
    ".npz": write_npz, ".parquet": write_parquet, ".h5ad": write_h5ad}


# --- reading back ---------------------------------------------------------------------------------
@dataclass
class EmbeddingTable:
    """A pooled embedding file in memory: what probes and plots need."""

    ids: np.ndarray
    sequences: np.ndarray
    metadata: dict[str, np.ndarray]
    arrays: dict[str, np.ndarray]  # "embeddings" and any "layer_<i>", each (N, D)
    info: dict[str, Any]


def read_embeddings(path: str | Path) -> EmbeddingTable:
    """Read a pooled embedding file written by `biotf embed` (any of EMBEDDING_FORMATS)."""
    path = Path(path)
    suffix = output_format(path, EMBEDDING_FORMATS)
    if not path.is_file():
        raise InputError(f"embedding file {path} does not exist")
    try:
        return {".npz": _read_npz, ".parquet": _read_parquet, ".h5ad": _read_h5ad}[suffix](path)
    except InputError:
        raise
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as error:  # EOFError: np.load of an empty file
        raise InputError(f"{path}: not an embedding file written by biotf embed ({error or type(error).__name__})") from None


def _pooled(text: str, path: Path) -> dict[str, Any]:
    """The file's metadata `text` (biotf embed's JSON object), after refusing per-token files (checked before their
    bulk is read)."""
    info = parse_json_object(text, str(path), "embedding file metadata")
    if info.get("pool") == "none":
        raise InputError(f"{path} holds per-token vectors ({given('pool', 'none')}); probes and maps need pooled "
                         f"vectors (allowed: {parameter('pool')} mean, cls or max)")
    return info


def _read_npz(path: Path) -> EmbeddingTable:
    with np.load(path, allow_pickle=False) as data:
        info = _pooled(str(data["info"]), path)
        names = [k for k in data.files if k.startswith("metadata/")]
        pairs = {k.removesuffix(".utf8") for k in names if k.endswith(".utf8")} & {
            k.removesuffix(".offsets") for k in names if k.endswith(".offsets")}  # long columns' two arrays
        columns = dict.fromkeys(k.rpartition(".")[0] if k.endswith((".utf8", ".offsets")) and k.rpartition(".")[0]
                                in pairs else k for k in names)
        metadata = {k.split("/", 1)[1]: npz_text(data, k) for k in columns}
        arrays = {k: data[k] for k in data.files if k == "embeddings" or k.startswith("layer_")}
        return EmbeddingTable(npz_text(data, "ids"), npz_text(data, "sequences"), metadata, arrays, info)


def _read_parquet(path: Path) -> EmbeddingTable:
    import pyarrow.parquet as pq

    info = _pooled(pq.read_schema(path).metadata[b"biotf"].decode("utf-8"), path)
    table = pq.read_table(path)
    arrays = {}
    for name in table.column_names:
        if name == "embeddings" or name.startswith("layer_"):
            column = table.column(name).combine_chunks()
            arrays[name] = column.flatten().to_numpy().reshape(len(column), -1)
    plain = [n for n in table.column_names if n not in arrays and n not in ("id", "sequence")]
    metadata = {n: np.array(table.column(n).to_pylist(), dtype=str) for n in plain}
    return EmbeddingTable(np.array(table.column("id").to_pylist(), dtype=str),
                          np.array(table.column("sequence").to_pylist(), dtype=str), metadata, arrays, info)


def _read_h5ad(path: Path) -> EmbeddingTable:
    import anndata

    data = anndata.read_h5ad(path)
    info = _pooled(str(data.uns["biotf"]), path)
    metadata = {c: data.obs[c].astype(str).to_numpy() for c in data.obs.columns if c != "sequence"}
    arrays = {"embeddings": np.asarray(data.X), **{k: np.asarray(v) for k, v in data.obsm.items()}}
    sequences = data.obs["sequence"].astype(str).to_numpy() if "sequence" in data.obs else np.array([], str)
    return EmbeddingTable(data.obs_names.to_numpy().astype(str), sequences, metadata, arrays, info)
