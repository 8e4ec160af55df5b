"""Tokenize once into memory-mapped token shards, reuse them on every later run (nanoGPT's idea).

A cache entry is a directory holding, per split, a flat token array (the narrowest of `uint8`, `uint16`
and `int32` that holds the vocabulary: a protein or DNA cache is half the bytes it would be in `uint16`, written, copied
and checksummed once each), `int64` record offsets into it, the records' positions in the input file, and
unigram token counts; plus `meta.json`. Its name is a hash of everything that changes the result:
the input file's content, the tokenizer fingerprint, the reader options, the split fraction and
seed, and whether special tokens are added. Options applied later (max length, long-sequence
policy, packing) are not part of the key, so changing them costs no re-tokenization.

Safety: entries are written under a temporary name and renamed into place, so a killed run never
leaves a half-written entry under the final name; `meta.json` records each file's size and CRC-32,
checked on load, so a truncated or corrupted shard is detected and rebuilt, never read as data. A build the disk
refuses (full, read-only) removes its temporary and is one line naming the entry (`biotf.errors.disk_error`).
Memory: records stream from the reader in chunks of about `chunk_characters`, so peak memory is
bounded by the chunk size and the longest record, not by the input size.
Speed: a chunk is columns of ids and sequences (`read_columns`), encoded in one `encode_flat` call, split by one
bulk hash pass and written as whole arrays, so no Python object is made per record beyond its id and sequence.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from biotf.io.readers import ReaderOptions, read_columns
from biotf.data.tokenize import naming_source
from biotf.data.splits import SPLITS, validate_fraction, validation_mask
from biotf.io.atomic import close_quietly
from biotf.errors import InputError, disk_errors
from biotf.tokenizers.base import PolicyStats, Tokenizer
from biotf.untrusted import file_crc32

log = logging.getLogger(__name__)

# 2: policy counts include duplicate_ids; 3: BOM stripped and counted, FASTA ids end at any whitespace;
# 4: a CSV/TSV column named `id` holds the ids (duplicate_ids counts them)
CACHE_VERSION = 4
META_FILE = "meta.json"
SHARD_ARRAYS = {"tokens": None, "offsets": np.int64, "records": np.int64, "counts": np.int64}  # None: token dtype


class CorruptCacheError(Exception):
    """A cache entry that fails its size or checksum check; internal, it triggers a rebuild."""


@dataclass(frozen=True)
class TokenShard:
    """One split's tokenized records: record `i` is `tokens[offsets[i]:offsets[i + 1]]`.

    `records[i]` is the record's 0-based position in the input file; `counts[t]` how often token
    id `t` occurs in this split (the unigram distribution for the baseline loss).
    """

    tokens: np.ndarray
    offsets: np.ndarray
    records: np.ndarray
    counts: np.ndarray

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i]:self.offsets[i + 1]]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def n_tokens(self) -> int:
        return int(self.offsets[-1])


@dataclass(frozen=True)
class ShardCache:
    """A loaded cache entry: its directory, both splits, and the policy counts of its build."""

    directory: Path
    splits: dict[str, TokenShard]
    policy_stats: PolicyStats
    status: str  # "built", "reused" or "rebuilt (<reason>)"


def file_digest(path: Path) -> str:
    """BLAKE2b of the file's bytes: the cache is keyed by content, not by name or mtime."""
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as handle:
        while block := handle.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def token_dtype(vocab_size: int) -> np.dtype:
    """The narrowest type of the shard's token ids. Entries store theirs in meta.json, so an entry of another width
    (uint16 protein caches written before uint8 existed) loads as it is."""
    for dtype in (np.uint8, np.uint16):
        if vocab_size <= np.iinfo(dtype).max + 1:
            return np.dtype(dtype)
    return np.dtype(np.int32)


def cache_key(input_digest: str, tokenizer: Tokenizer, options: ReaderOptions, validation_fraction: float,
              seed: int, add_special_tokens: bool) -> str:
    blob = json.dumps({"version": CACHE_VERSION, "input": input_digest, "tokenizer": tokenizer.fingerprint,
                       "reader": options.as_key(), "validation_fraction": validation_fraction, "seed": seed,
                       "add_special_tokens": add_special_tokens}, sort_keys=True)
    return hashlib.blake2b(blob.encode(), digest_size=12).hexdigest()


def token_counts(tokens: np.ndarray, vocab_size: int) -> np.ndarray:
    """`np.bincount(tokens, minlength=vocab_size)`. Ids that fit in a byte are counted in pairs, each pair read as
    one 16-bit number: half the increments (a histogram's cost), into a 65,536-bin table that stays in cache,
    whose row and column sums are the counts of the pairs' first and second ids."""
    if vocab_size > 256 or len(tokens) < 2:
        return np.bincount(tokens, minlength=vocab_size)
    ids = tokens.astype(np.uint8, copy=False)
    pairs = np.bincount(ids[:len(ids) // 2 * 2].view(np.uint16), minlength=1 << 16).reshape(256, 256)
    counts = pairs.sum(axis=0) + pairs.sum(axis=1)
    if len(ids) % 2:
        counts[ids[-1]] += 1
    return counts[:vocab_size]


def _tokens_of(selected: np.ndarray, tokens: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The tokens of the selected records (`tokens` holds records of `lengths` ids one after another), in order:
    each run of consecutive selected records is copied as one slice, a few memcpys instead of a boolean index
    over every token."""
    ends = np.cumsum(lengths)
    edges = np.flatnonzero(np.diff(selected)) + 1  # where a run of equally selected records begins
    firsts, lasts = np.r_[0, edges], np.r_[edges, len(selected)] - 1
    kept = selected[firsts]
    starts, stops = (ends - lengths)[firsts[kept]].tolist(), ends[lasts[kept]].tolist()
    slices = [tokens[start:stop] for start, stop in zip(starts, stops)]
    return np.concatenate(slices) if slices else tokens[:0]


class _SplitWriter:
    """Appends one split's arrays to raw files in a directory, keeping only running totals in memory: the CRC-32 of
    each file is taken from the bytes as they are written (reading the files back would be a second pass)."""

    def __init__(self, directory: Path, name: str, dtype: np.dtype, vocab_size: int):
        self.directory, self.name, self.dtype = directory, name, dtype
        self.handles = {kind: open(directory / f"{name}.{kind}.bin", "wb") for kind in ("tokens", "offsets", "records")}
        self.crc32 = dict.fromkeys(SHARD_ARRAYS, 0)
        self._write("offsets", np.zeros(1, np.int64))
        self.n_tokens = 0
        self.counts = np.zeros(vocab_size, np.int64)

    def _write(self, kind: str, array: np.ndarray) -> None:
        data = memoryview(np.ascontiguousarray(array)).cast("B")  # the array's own bytes, not a bytes copy
        self.handles[kind].write(data)
        self.crc32[kind] = zlib.crc32(data, self.crc32[kind])

    def append(self, tokens: np.ndarray, lengths: np.ndarray, indices: np.ndarray) -> None:
        """Records given as their ids joined (`tokens`, of the split's dtype), each one's number of ids and its
        position in the file."""
        if not len(lengths):
            return
        self.counts += token_counts(tokens, len(self.counts))
        self._write("tokens", tokens)
        self._write("offsets", self.n_tokens + np.cumsum(lengths, dtype=np.int64))
        self._write("records", indices.astype(np.int64, copy=False))
        self.n_tokens += int(lengths.sum())

    def close(self) -> dict[str, dict[str, int]]:
        for handle in self.handles.values():
            handle.close()
        (self.directory / f"{self.name}.counts.bin").write_bytes(self.counts.tobytes())
        self.crc32["counts"] = zlib.crc32(self.counts.tobytes())
        return {kind: {"bytes": (self.directory / f"{self.name}.{kind}.bin").stat().st_size, "crc32": crc32}
                for kind, crc32 in self.crc32.items()}


def _build(directory: Path, path: Path, tokenizer: Tokenizer, options: ReaderOptions, validation_fraction: float,
           seed: int, add_special_tokens: bool, chunk_characters: int, meta: dict) -> None:
    """Stream `path` in runs of records (columns: no per-record objects), tokenize each run in one call, split it
    with one bulk hash pass, and append each split's part as whole arrays."""
    dtype = token_dtype(tokenizer.vocab_size)
    writers = {name: _SplitWriter(directory, name, dtype, tokenizer.vocab_size) for name in SPLITS}
    try:
        stats = PolicyStats()
        for run in read_columns(path, options, stats, chunk_characters):
            with naming_source(path):
                tokens, lengths = tokenizer.encode_flat(run.sequences, add_special_tokens, records=run.ids, stats=stats)
            if not lengths.all():
                at = int(np.argmin(lengths))
                raise InputError(f"{path}: record {run.ids[at]!r} (record {run.first + at + 1}) encodes to no tokens")
            if tokens.min() < 0 or tokens.max() >= tokenizer.vocab_size:
                raise InputError(f"tokenizer produced an id outside 0..{tokenizer.vocab_size - 1}; "
                                 "its vocab_size is wrong")
            tokens = tokens.astype(dtype, copy=False)  # before the split: half the bytes to copy
            validation = validation_mask(run.sequences, validation_fraction, seed)
            indices = np.arange(run.first, run.first + len(lengths), dtype=np.int64)
            for name, selected in (("train", ~validation), ("validation", validation)):
                writers[name].append(_tokens_of(selected, tokens, lengths), lengths[selected], indices[selected])
        meta["dtype"] = dtype.name
        meta["policy_stats"] = dict(stats)
        meta["splits"] = {}
        for name, writer in writers.items():
            files = writer.close()
            meta["splits"][name] = {"records": files["records"]["bytes"] // 8, "tokens": writer.n_tokens,
                                    "files": files}
    except BaseException:  # the entry is thrown away (`tokenize_to_cache`): a full disk's last flush loses nothing
        close_quietly(handle for writer in writers.values() for handle in writer.handles.values())
        raise
    (directory / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")


def _load(directory: Path, key: str, vocab_size: int) -> tuple[dict[str, TokenShard], PolicyStats]:
    """Open a cache entry read-only after checking every file's size and checksum."""
    try:
        meta = json.loads((directory / META_FILE).read_text())
    except (OSError, ValueError) as error:
        raise CorruptCacheError(f"unreadable {META_FILE}: {error}") from None
    if meta.get("version") != CACHE_VERSION or meta.get("key") != key:
        raise CorruptCacheError("version or key mismatch")
    splits = {}
    for name in SPLITS:
        info = meta["splits"][name]
        arrays = {}
        for kind, dtype in SHARD_ARRAYS.items():
            path = directory / f"{name}.{kind}.bin"
            expected = info["files"][kind]
            if not path.is_file() or path.stat().st_size != expected["bytes"]:
                raise CorruptCacheError(f"{path.name} is missing or has the wrong size")
            if file_crc32(path) != expected["crc32"]:
                raise CorruptCacheError(f"{path.name} fails its checksum")
            dtype = np.dtype(dtype or meta["dtype"])
            count = expected["bytes"] // dtype.itemsize
            # np.memmap refuses empty files; an empty split is an empty array.
            arrays[kind] = np.memmap(path, dtype, mode="r", shape=(count,)) if count else np.zeros(0, dtype)
        if len(arrays["counts"]) != vocab_size or len(arrays["offsets"]) != info["records"] + 1:
            raise CorruptCacheError(f"{name} split has inconsistent array lengths")
        splits[name] = TokenShard(**arrays)
    return splits, PolicyStats(meta.get("policy_stats", {}))


def tokenize_to_cache(path: str | Path, tokenizer: Tokenizer, cache_dir: str | Path,
                      reader_options: ReaderOptions | None = None, validation_fraction: float = 0.05,
                      seed: int = 0, add_special_tokens: bool = True,
                      chunk_characters: int = 1 << 20) -> ShardCache:
    """Tokenized, split shards of `path`: reused from `cache_dir` when present and intact, else built."""
    path = Path(path)
    options = reader_options or ReaderOptions()
    validate_fraction(validation_fraction)
    if not path.is_file():
        raise InputError(f"input file {path} does not exist" if not path.exists() else f"input {path} is not a file")
    key = cache_key(file_digest(path), tokenizer, options, validation_fraction, seed, add_special_tokens)
    cache_dir = Path(cache_dir)
    final = cache_dir / f"{path.name}-{key}"
    status = "built"
    if final.exists():
        try:
            splits, stats = _load(final, key, tokenizer.vocab_size)
            return ShardCache(final, splits, stats, "reused")
        except CorruptCacheError as reason:
            log.warning("token cache %s is damaged (%s); rebuilding it", final, reason)
            status = f"rebuilt ({reason})"
            shutil.rmtree(final, ignore_errors=True)
    meta = {"version": CACHE_VERSION, "key": key, "input": str(path), "tokenizer": tokenizer.fingerprint,
            "tokenizer_kind": tokenizer.kind, "reader": options.as_key(),
            "validation_fraction": validation_fraction, "seed": seed, "add_special_tokens": add_special_tokens}
    with disk_errors(final):  # a full disk or a read-only cache_dir: one line naming the entry
        cache_dir.mkdir(parents=True, exist_ok=True)
        temporary = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=cache_dir))
        try:
            _build(temporary, path, tokenizer, options, validation_fraction, seed, add_special_tokens,
                   chunk_characters, meta)
            try:
                os.rename(temporary, final)
            except OSError:  # another process published the same entry first; use theirs if it is intact
                shutil.rmtree(temporary, ignore_errors=True)
        except BaseException:
            shutil.rmtree(temporary, ignore_errors=True)
            raise
    try:
        splits, stats = _load(final, key, tokenizer.vocab_size)
    except CorruptCacheError as reason:  # only if the disk or another writer damaged it just now
        raise InputError(f"token cache {final} is damaged right after it was written ({reason}); "
                         "check the disk and run again") from None
    return ShardCache(final, splits, stats, status)
