"""FASTA records parsed a block of text at a time: what Biopython's `SimpleFastaParser` yields, at C speed.

`SimpleFastaParser` reads line by line in Python (about half of the token cache's build time on proteins). Here
records are cut at every "\\n>" in blocks of `BLOCK_CHARACTERS` and each sequence is joined with `str.replace`.
The result is Biopython's exactly: a header line is any line starting with ">", the title is the rest of it with
trailing whitespace removed, and the sequence is the record's other lines, each with trailing whitespace
removed, joined, without spaces or carriage returns. The one case `replace` alone cannot mirror, whitespace
other than spaces (a tab, a form feed, a no-break space) ending a line, is found (`has_other_whitespace`) and
parsed line by line as Biopython does; the search runs once per block, and per record only in blocks where it
finds such whitespace (or any non-ASCII character). A record is held whole (a chromosome too), never the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO

BLOCK_CHARACTERS = 1 << 20
ASCII_OTHER_WHITESPACE = "\t\x0b\x0c\x1c\x1d\x1e\x1f"  # str.isspace in ASCII, less " ", "\n", "\r"


def fasta_runs(stream: IO[str], first: str) -> Iterator[tuple[list[str], list[str]]]:
    """The title and sequence of each record of `stream`, whose first record's header line `first` was already
    read, as two lists per block of text read (a run of records: the callers that want columns, such as the token
    cache, build no per-record objects)."""
    for texts, plain in record_text_runs(stream, first):
        titles, sequences = [], []
        for text in texts:
            title, _, body = text.partition("\n")
            titles.append(title.rstrip())
            sequence = body.replace("\n", "").replace(" ", "").replace("\r", "")
            if not plain and has_other_whitespace(sequence):  # only line-by-line stripping gives Biopython's result
                sequence = "".join(line.rstrip() for line in body.split("\n")).replace(" ", "").replace("\r", "")
            sequences.append(sequence)
        yield titles, sequences


def has_other_whitespace(text: str) -> bool:
    """Whether `text` holds whitespace other than spaces, newlines and carriage returns (what `str.rstrip` strips): a
    few memchr scans for ASCII text, `str.isprintable` (every whitespace character is unprintable) otherwise."""
    if text.isascii():
        return any(character in text for character in ASCII_OTHER_WHITESPACE)
    return not text.isprintable()


def _plain(block: str) -> bool:
    """Whether `block` is ASCII without whitespace other than spaces, newlines and carriage returns: then no record
    cut from it needs `has_other_whitespace`."""
    return block.isascii() and not any(character in block for character in ASCII_OTHER_WHITESPACE)


def record_text_runs(stream: IO[str], first: str) -> Iterator[tuple[list[str], bool]]:
    """The text of each record after its ">" (up to the newline before the next ">", or the end), in one list per
    block read, with whether every block these texts came from is `_plain`. Records are cut at every newline
    followed by ">" with one `str.split` per block, also where one block ends with the newline and the next
    begins with the ">"; a record longer than a block gathers its pieces in a list, so it is joined once."""
    pieces = [first[1:]]  # of the record begun but not yet cut
    pieces_plain = _plain(first)
    ends_line = first.endswith("\n")
    while block := stream.read(BLOCK_CHARACTERS):
        block_plain = _plain(block)
        plain = pieces_plain and block_plain
        texts: list[str] = []
        if ends_line and block.startswith(">"):
            texts.append("".join(pieces))
            pieces, block = [], block[1:]
        ends_line = block.endswith("\n")
        *cut, rest = block.split("\n>")
        if cut:
            cut[0] = "".join([*pieces, cut[0]])
            texts += cut
            pieces = [rest]
        else:
            pieces.append(rest)
        # the record still open holds the earlier blocks' text too unless a record was cut in this one
        pieces_plain = block_plain and (pieces_plain or bool(texts))
        yield texts, plain
    yield ["".join(pieces)], pieces_plain
