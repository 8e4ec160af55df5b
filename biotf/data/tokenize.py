"""`tokenize_file`: every record of a file as one line of tokens, and what the reader and tokenizer changed.

What `biotf tokenize` prints: `id<TAB>tokens` (or token ids) per record. Records stream through in chunks of
`CHUNK_RECORDS`, so memory does not grow with the file; the counts always cover the whole file.
"""

from __future__ import annotations

from itertools import islice
from pathlib import Path
from typing import NamedTuple, TextIO

from biotf.data.readers import ReaderOptions, read_records, with_source
from biotf.errors import TokenizationError
from biotf.tokenizers.base import PolicyStats, Tokenizer

CHUNK_RECORDS = 1024


class TokenizedFile(NamedTuple):
    """What `tokenize_file` counted; unpacks as `records, tokens, policies = ...`."""

    records: int
    tokens: int
    policies: PolicyStats


def tokenize_file(tokenizer: Tokenizer, path: Path, reader_options: ReaderOptions, out: TextIO,
                  as_ids: bool = False, add_special_tokens: bool = True, limit: int | None = None) -> TokenizedFile:
    """Write one line per record to `out` (the first `limit` records only); count every record of the file."""
    policies = PolicyStats()
    inverse = None if as_ids else {i: t for t, i in tokenizer.get_vocab().items()}
    records = read_records(path, reader_options, policies)
    n_records = n_tokens = 0
    while chunk := list(islice(records, CHUNK_RECORDS)):
        try:
            encoded = tokenizer.encode_batch([r.sequence for r in chunk], add_special_tokens,
                                             records=[r.id for r in chunk], stats=policies)
        except TokenizationError as error:
            raise with_source(error, path) from None
        for record, ids in zip(chunk, encoded):
            if limit is None or n_records < limit:
                shown = " ".join(map(str, ids.tolist())) if as_ids else " ".join(inverse[i] for i in ids.tolist())
                out.write(f"{record.id}\t{shown}\n")
            n_records += 1
            n_tokens += len(ids)
    return TokenizedFile(n_records, n_tokens, policies)
