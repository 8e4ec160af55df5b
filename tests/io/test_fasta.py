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


# --- repeated ids, counted in bounded memory ---------------------------------------------------------------------
from biotf.io import duplicates  # noqa: E402
from biotf.io.duplicates import DuplicateCounter  # noqa: E402


@pytest.mark.parametrize("buffer", [3, 1 << 20])
@pytest.mark.parametrize("bulk", [False, True])
def test_repeated_ids_are_counted_alike_in_memory_and_spilled_to_bucket_files(monkeypatch, buffer, bulk):
    monkeypatch.setattr(duplicates, "BUFFER_KEYS", buffer)
    rng = random.Random(0)
    ids = [f"id{rng.randint(0, 60)}" for _ in range(200)] + ["", "x", "x"]
    counter = DuplicateCounter()
    if bulk:  # in runs of 7: runs that fill the buffer partly, wholly and more than once
        for at in range(0, len(ids), 7):
            counter.add_ids(ids[at:at + 7])
    else:
        for identifier in ids:
            counter.add(hash(identifier))
    assert counter.added == len(ids)
    spilled = counter.spilled
    assert (spilled is not None) is (buffer == 3)
    assert counter.count() == len(ids) - len(set(ids))
    assert spilled is None or not spilled.exists()  # the bucket files are removed


def test_reading_stopped_early_leaves_no_spilled_files(monkeypatch, tmp_path):
    from biotf.io.readers import read_records

    monkeypatch.setattr(duplicates, "BUFFER_KEYS", 2)
    made = []
    monkeypatch.setattr(duplicates.tempfile, "mkdtemp", lambda prefix: made.append(tmp_path / "ids") or
                        str((tmp_path / "ids").mkdir() or tmp_path / "ids"))
    path = tmp_path / "x.fasta"
    path.write_text("".join(f">r{i}\nACGT\n" for i in range(10)))
    records = read_records(path)
    assert [next(records).id for _ in range(5)] == ["r0", "r1", "r2", "r3", "r4"]
    records.close()
    assert made and not made[0].exists()
