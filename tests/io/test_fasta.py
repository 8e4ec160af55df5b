"""`biotf.io.fasta`: records parsed a block at a time equal Biopython's SimpleFastaParser, whatever the text."""

from __future__ import annotations

import io
import random

import pytest
from Bio.SeqIO.FastaIO import SimpleFastaParser

from biotf.io import fasta
from biotf.io.fasta import fasta_runs

PIECES = ["ACGT", "MKV", "\n", "\n", "\n>", ">", " ", "\t", "\r", "\x0c", "\x1d", "\xa0", "  \n", "x y", "*-", "\n\n", "é"]


def biopython(text: str) -> list[tuple[str, str]]:
    return list(SimpleFastaParser(io.StringIO(text)))


def ours(text: str) -> list[tuple[str, str]]:
    stream = io.StringIO(text)
    first = stream.readline()
    return [record for titles, sequences in fasta_runs(stream, first) for record in zip(titles, sequences)]


@pytest.mark.parametrize("block", [1, 2, 3, 7, 64])
def test_random_texts_parse_as_biopython_parses_them_for_any_block_size(monkeypatch, block):
    """Blocks of a few characters put every cut ("\\n" ending one block, ">" starting the next) at a boundary."""
    monkeypatch.setattr(fasta, "BLOCK_CHARACTERS", block)
    rng = random.Random(block)
    for _ in range(300):
        text = ">" + "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 30)))
        assert ours(text) == biopython(text), repr(text)


def test_a_record_spanning_many_blocks_is_whole(monkeypatch):
    monkeypatch.setattr(fasta, "BLOCK_CHARACTERS", 5)
    text = ">chr1 a long one\n" + "ACGTACGTAC\n" * 50 + ">chr2\nGG \n"
    assert ours(text) == [("chr1 a long one", "ACGTACGTAC" * 50), ("chr2", "GG")] == biopython(text)
