"""Tokenizing records as they stream from a file: chunked `encode_batch` calls, and `tokenize_file`.

`encode_chunks` is the one loop the embedding pipeline and `tokenize_file` share: one vectorised `encode_batch`
call per chunk of records, a tokenizer error naming the file (`naming_source`, which the shard cache's columns
use too: tokenizers see texts, not files). `tokenize_file` is what `biotf tokenize` prints: `id<TAB>tokens` (or
token ids) per record, with counts that always cover the whole file; memory does not grow with the file.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from itertools import islice
from pathlib import Path
from typing import NamedTuple, TextIO

import numpy as np

from biotf.io.readers import ReaderOptions, Record, read_records, with_source
from biotf.errors import TokenizationError
from biotf.tokenizers.base import PolicyStats, Tokenizer

CHUNK_RECORDS = 1024


def record_chunks(records: Iterable[Record], size: int) -> Iterator[list[Record]]:
    """`records` in lists of `size` (the last one shorter)."""
    records = iter(records)
    while chunk := list(islice(records, size)):
        yield chunk


@contextmanager
def naming_source(source: str | Path | None) -> Iterator[None]:
    """A tokenizer error raised inside, naming the file `source` (tokenizers see texts, not files)."""
    try:
        yield
    except TokenizationError as error:
        raise (error if source is None else with_source(error, source)) from None


def encode_chunks(chunks: Iterable[list[Record]], tokenizer: Tokenizer, add_special_tokens: bool,
                  stats: PolicyStats | None = None, source: str | Path | None = None
                  ) -> Iterator[tuple[list[Record], list[np.ndarray]]]:
    """Each chunk with its records' token ids; policy counts go to `stats`, and a tokenizer error names `source`."""
    for chunk in chunks:
        with naming_source(source):
            encoded = tokenizer.encode_batch([r.sequence for r in chunk], add_special_tokens,
                                             records=[r.id for r in chunk], stats=stats)
        yield chunk, encoded


class TokenizedFile(NamedTuple):
    """What `tokenize_file` counted; unpacks as `records, tokens, policies = ...`."""

    records: int
    tokens: int
    policies: PolicyStats


def content_start(full: np.ndarray, content: np.ndarray) -> int | None:
    """Where a record's content tokens (encoded without special tokens) begin inside its ids encoded with them
    (after <cls>, <bos> and the like); None if they do not appear there unchanged."""
    for at in range(len(full) - len(content) + 1):
        if np.array_equal(full[at:at + len(content)], content):
            return at
    return None


def tokenize_file(tokenizer: Tokenizer, path: Path, reader_options: ReaderOptions, out: TextIO,
                  as_ids: bool = False, add_special_tokens: bool = True, limit: int | None = None) -> TokenizedFile:
    """Write one line per record to `out` (the first `limit` records only); count every record of the file."""
    policies = PolicyStats()
    inverse = None if as_ids else {i: t for t, i in tokenizer.get_vocab().items()}
    chunks = record_chunks(read_records(path, reader_options, policies), CHUNK_RECORDS)
    n_records = n_tokens = 0
    for chunk, encoded in encode_chunks(chunks, tokenizer, add_special_tokens, policies, path):
        for record, ids in zip(chunk, encoded):
            if limit is None or n_records < limit:
                shown = " ".join(map(str, ids.tolist())) if as_ids else " ".join(inverse[i] for i in ids.tolist())
                out.write(f"{record.id}\t{shown}\n")
            n_records += 1
            n_tokens += len(ids)
    return TokenizedFile(n_records, n_tokens, policies)
