"""Readers on the real shared files and on every kind of bad file issue 7 lists."""

from __future__ import annotations

import gzip

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from biotf.io.readers import ReaderOptions, detect_format, read_columns, read_records
from biotf.errors import InputError
from biotf.tokenizers.base import PolicyStats


def test_fasta_real_files(shared_data):
    records = list(read_records(shared_data / "proteins/deeploc_test_set.fasta"))
    assert len(records) == 2768
    assert [r.index for r in records[:3]] == [0, 1, 2]
    labelled = records[0].metadata["description"]
    assert labelled.startswith("Location-") or "-" in labelled
    b_z = next(r for r in records if r.id == "P00293")
    assert "B" in b_z.sequence and "Z" in b_z.sequence


def test_gzip_is_transparent(shared_data):
    records = list(read_records(shared_data / "proteins/flip_ss3_sequences.fasta.gz"))
    assert len(records) == 11156 and records[0].id == "1es5-A"
    assert any("O" in r.sequence for r in records if r.id == "1nth-A")


def test_gzip_detected_without_suffix(tmp_path):
    path = tmp_path / "hidden.fasta"
    path.write_bytes(gzip.compress(b">a\nMKV\n"))
    assert [r.sequence for r in read_records(path)] == ["MKV"]


def test_genbank_record_with_metadata(shared_data):
    (record,) = read_records(shared_data / "dna/biopython_NC_001422_phiX174.gbk")
    assert record.id == "NC_001422.1" and len(record.sequence) == 5386
    assert record.metadata["organism"] == "coliphage phiX174"


def test_csv_sequence_id_and_metadata_columns(shared_data):
    stats = PolicyStats()
    options = ReaderOptions(column="smiles", id_column="Compound ID")
    records = list(read_records(shared_data / "smiles/molnet_esol.csv", options, stats))
    assert len(records) == 1128 and records[0].id == "Amigdalin"
    assert not records[0].sequence.endswith(" ")
    assert "measured log solubility in mols per litre" in records[0].metadata
    assert "smiles" not in records[0].metadata and "Compound ID" not in records[0].metadata
    assert stats["whitespace_stripped"] >= 212  # the trailing spaces SOURCES.md names, counted


def test_csv_default_sequence_column_and_gzip(shared_data):
    records = read_records(shared_data / "smiles/molnet_hiv.csv.gz")
    first = next(records)
    assert first.metadata.keys() == {"activity", "HIV_active"}


def test_tsv_is_unquoted_by_default(shared_data):
    options = ReaderOptions(column="document", id_column="id")
    records = list(read_records(shared_data / "text/nsmc_raw_subset_10k.tsv", options))
    assert len(records) == 10000  # 42 lines contain '"'; quoting would merge rows
    assert set(records[0].metadata) == {"movie_id", "rating", "label"}


def test_a_column_named_id_is_the_record_id_unless_id_column_names_another(tmp_path, shared_data):
    """One rule for every reader user: without id_column, a column named `id` (any case) holds the ids."""
    path = tmp_path / "t.csv"
    path.write_text("ID,sequence,note\nq1,MKV,a\nq2,MKL,b\n")
    records = list(read_records(path))
    assert [r.id for r in records] == ["q1", "q2"] and records[0].metadata == {"note": "a"}
    assert [r.id for r in read_records(path, ReaderOptions(id_column="note"))] == ["a", "b"]
    assert [r.id for r in read_records(path, ReaderOptions(column="ID"))] == ["0", "1"]  # the sequences themselves
    assert [r.id for r in read_records(path, ReaderOptions(header=False, column="1"))] == ["0", "1", "2"]
    nsmc = read_records(shared_data / "text/nsmc_raw_subset_10k.tsv", ReaderOptions(column="document"))
    assert next(nsmc).id == next(read_records(shared_data / "text/nsmc_raw_subset_10k.tsv",
                                              ReaderOptions(column="document", id_column="id"))).id


def test_headerless_csv_by_index_with_format_override(shared_data):
    options = ReaderOptions(format="csv", header=False, column="2", id_column="1")
    records = list(read_records(shared_data / "dna/uci_promoters.data", options))
    assert len(records) == 106 and all(len(r.sequence) == 57 for r in records)
    assert {r.metadata["0"] for r in records} == {"+", "-"}


def test_text_crlf_and_blank_lines_counted(tmp_path, shared_data):
    records = list(read_records(shared_data / "text/ko_constitution_kolaw.txt"))
    assert all("\r" not in r.sequence for r in records)
    path = tmp_path / "t.txt"
    path.write_bytes(b"first\r\n\r\nsecond\r\n")
    stats = PolicyStats()
    assert [(r.id, r.sequence) for r in read_records(path, stats=stats)] == [("line1", "first"), ("line3", "second")]
    assert stats["blank_lines_skipped"] == 1
    with pytest.raises(InputError, match="line 2: blank line"):
        list(read_records(path, ReaderOptions(skip_blank_lines=False)))


@pytest.mark.parametrize("name", ["one.csv", "one.tsv", "one.smi", "one.txt"])
def test_a_blank_line_of_a_one_column_table_is_a_text_files_blank_line(tmp_path, name):
    """Skipped and counted by default, refused without skip_blank_lines: one rule for .txt, .smi and such tables."""
    path = tmp_path / name
    path.write_bytes((b"" if name.endswith((".smi", ".txt")) else b"sequence\n") + b"CCO\n\nC\n")
    stats = PolicyStats()
    records = list(read_records(path, stats=stats))
    assert [r.sequence for r in records] == ["CCO", "C"] and [r.index for r in records] == [0, 1]
    assert stats["blank_lines_skipped"] == 1
    with pytest.raises(InputError, match=rf"{name}: line {2 if name.endswith(('.smi', '.txt')) else 3}: blank line"):
        list(read_records(path, ReaderOptions(skip_blank_lines=False)))


def test_a_blank_line_of_a_wider_table_lacks_its_fields(tmp_path):
    path = tmp_path / "two.csv"
    path.write_bytes(b"id,sequence\na,CCO\n\nb,C\n")
    with pytest.raises(InputError, match="line 3: empty row"):
        list(read_records(path))
    with pytest.raises(InputError, match="line 3: empty row"):
        list(read_records(path, ReaderOptions(keep_empty=True)))


def test_fasta_crlf(tmp_path):
    path = tmp_path / "w.fa"
    path.write_bytes(b">a one\r\nMK\r\nVL\r\n>b\r\nAC\r\n")
    assert [(r.id, r.sequence, r.metadata["description"]) for r in read_records(path)] == [
        ("a", "MKVL", "one"), ("b", "AC", "")]


def test_bom_is_stripped_and_counted(tmp_path):
    """Excel's "CSV UTF-8" and Windows editors start files with U+FEFF: never part of a column name or an id."""
    bom = b"\xef\xbb\xbf"
    table = tmp_path / "x.csv"
    table.write_bytes(bom + b"id,sequence,label\np1,MKV,a\n")
    stats = PolicyStats()
    (record,) = read_records(table, ReaderOptions(id_column="id"), stats)
    assert (record.id, record.sequence, record.metadata) == ("p1", "MKV", {"label": "a"})
    assert stats == {"byte_order_mark_stripped": 1}
    fasta = tmp_path / "x.fasta"
    fasta.write_bytes(bom + b">p1 d\nMKV\n")
    stats = PolicyStats()
    assert [(r.id, r.sequence) for r in read_records(fasta, stats=stats)] == [("p1", "MKV")]
    assert stats == {"byte_order_mark_stripped": 1}
    fasta.write_bytes(b">p1 d\nMK\xef\xbb\xbfV\n")  # U+FEFF inside a sequence is a character, not a mark
    assert [r.sequence for r in read_records(fasta)] == ["MK\ufeffV"]


def test_fasta_id_ends_at_any_whitespace_as_in_biopython(tmp_path):
    from Bio import SeqIO

    path = tmp_path / "x.fasta"
    path.write_bytes(b">p1\tNucleus-S x\nMKV\n>p2  two spaces\nMKL\n>p3\x0bvtab\nMKA\n> p4 lead\nMKC\n")
    records = list(read_records(path))
    assert [r.id for r in records] == [entry.id for entry in SeqIO.parse(path, "fasta")] == ["p1", "p2", "p3", "p4"]
    assert [r.metadata["description"] for r in records] == ["Nucleus-S x", "two spaces", "vtab", "lead"]


def test_smi(tmp_path):
    path = tmp_path / "m.smi"
    path.write_text("CCO ethanol\nc1ccccc1\tbenzene\nC\n")
    assert [(r.id, r.sequence) for r in read_records(path)] == [("ethanol", "CCO"), ("benzene", "c1ccccc1"), ("line3", "C")]


@pytest.mark.parametrize("name, content, expected", [
    ("s.txt", b"CCO\n\n  \nC\n", ["CCO", "", "", "C"]),
    ("s.smi", b"CCO a\n\nC b\n", ["CCO", "", "C"]),
    ("s.csv", b"id,sequence\n1,CCO\n2,\n3, \n", ["CCO", "", ""]),
    ("one.csv", b"sequence\nCCO\n\nC\n\n", ["CCO", "", "C", ""]),  # a one-column table's blank line: ""
    ("s.fasta", b">a\nCCO\n>b\n>c\nC\n>d\n", ["CCO", "", "C", ""]),
])
def test_keep_empty_keeps_every_empty_record_in_place(tmp_path, name, content, expected):
    """A generated set's empty samples are records (invalid molecules to count), never skipped or refused."""
    path = tmp_path / name
    path.write_bytes(content)
    stats = PolicyStats()
    assert [r.sequence for r in read_records(path, ReaderOptions(keep_empty=True), stats)] == expected
    assert "blank_lines_skipped" not in stats


def test_keep_empty_is_out_of_the_cache_key_unless_set():
    """Token caches written before the option keep their key (it never applies to training data)."""
    assert "keep_empty" not in ReaderOptions().as_key()
    assert ReaderOptions(keep_empty=True).as_key()["keep_empty"] is True


BAD_FILES = [
    ("empty.fasta", b"", r"empty\.fasta: no records found .*the file is empty"),
    ("blank.fasta", b"\n\n", r"no records found"),
    ("trunc.fasta", b">a\nMK\n>b\n>c\nVL\n", r"record 'b' \(line 3\) has a header but no sequence"),
    ("last.fasta", b">a\nMK\n>b\n", r"record 'b' \(line 3\) has a header but no sequence"),
    ("notfasta.fasta", b"hello\n>a\nMK\n", r"line 1: expected a FASTA header"),
    ("latin1.fasta", b">a\nMK\n>b caf\xe9\nMK\n", r"latin1\.fasta: line 3: not UTF-8 text \(byte 0xe9 at column 7\)"),
    ("binary.fasta", bytes(range(256)) * 4, r"not UTF-8|expected a FASTA header"),
    ("nocol.csv", b"id,seq_x\n1,MK\n", r"no sequence column given and none of .* present; .*columns: id, seq_x"),
    ("short.csv", b"id,sequence\n1,MK\n2\n", r"line 3: 1 fields, expected 2"),
    ("emptyfield.csv", b"id,sequence\n1,\n", r"line 2: empty 'sequence' field"),
    ("quote.csv", b'id,sequence\n1,"MK\n', r"line \d+: malformed CSV"),
    ("trunc.fasta.gz", gzip.compress(b">a\nMKVL\n" * 200, mtime=0)[:-20], r"damaged or truncated compressed file"),
    ("x.unknownext", b">a\nMK\n", r"cannot tell the format of .*allowed: fasta, genbank"),
    ("bad.gb", b"LOCUS  broken\nnonsense\n", r"bad\.gb"),
]


@pytest.mark.parametrize("name, content, message", BAD_FILES)
@pytest.mark.parametrize("reader", [read_records, read_columns])
def test_bad_files_are_one_clear_input_error(tmp_path, name, content, message, reader):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(InputError, match=message):
        list(reader(path))


@pytest.mark.parametrize("name, content, options", [
    ("p.fasta", b"\xef\xbb\xbf" + b"".join(b">r%d x\r\nMKV%s\r\nLL\n" % (i % 7, b"A" * (i % 13)) for i in range(60)),
     ReaderOptions()),
    ("e.fasta", b">a\nCCO\n>b\n>c\nC\n>d\n" * 5, ReaderOptions(keep_empty=True)),
    ("t.csv", b"id,sequence\n" + b"".join(b"r%d, MK%s\n" % (i % 9, b"V" * (i % 11)) for i in range(60)),
     ReaderOptions()),
    ("l.txt", b"".join(b"MK%s\n\n" % (b"V" * (i % 5)) for i in range(60)), ReaderOptions()),
])
@pytest.mark.parametrize("characters", [0, 1, 7, 50, 1 << 20])
def test_read_columns_are_read_records_in_runs(tmp_path, monkeypatch, name, content, options, characters):
    """The token cache's lean path: the same records, counts (in the same order) and runs that close at the first
    record reaching `characters`, wherever the FASTA blocks fall."""
    from biotf.io import fasta

    monkeypatch.setattr(fasta, "BLOCK_CHARACTERS", 16)
    path = tmp_path / name
    path.write_bytes(content)
    record_stats, column_stats = PolicyStats(), PolicyStats()
    records = [(r.index, r.id, r.sequence) for r in read_records(path, options, record_stats)]
    runs = list(read_columns(path, options, column_stats, characters))
    assert [(run.first + i, identifier, sequence) for run in runs
            for i, (identifier, sequence) in enumerate(zip(run.ids, run.sequences))] == records
    assert list(column_stats.items()) == list(record_stats.items())
    sizes = [[len(sequence) for sequence in run.sequences] for run in runs]
    assert all(sum(run) >= characters for run in sizes[:-1])
    assert all(len(run) == 1 or sum(run[:-1]) < characters for run in sizes)


def test_missing_column_names_file_and_columns(shared_data):
    with pytest.raises(InputError, match=r"molnet_esol\.csv: sequence column 'SMILES' not found; columns: .*smiles"):
        list(read_records(shared_data / "smiles/molnet_esol.csv", ReaderOptions(column="SMILES")))


def test_missing_file_and_format_override(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        list(read_records(tmp_path / "nope.fasta"))
    with pytest.raises(InputError, match="unknown input format 'fastq'.*allowed: fasta"):
        detect_format(tmp_path / "a.fq", "fastq")
    assert detect_format(tmp_path / "A.FA.GZ") == "fasta"


def test_reader_streams(tmp_path):
    """The reader is lazy: a bad record late in the file is reached only when iterated to."""
    path = tmp_path / "late.fasta"
    path.write_bytes(b">a\nMK\n" * 1000 + b">bad\n")
    records = read_records(path)
    assert next(records).id == "a"


READ_TO_THE_END_OR_NOT = {
    "a.csv": "id,sequence\n" + "".join(f"r{i},MKT\n" for i in range(50)), "a.tsv": "id\tsequence\na\tMK\nb\tGA\n",
    "a.txt": "MKT\nGAV\n", "a.smi": "CCO ethanol\nc1ccccc1 benzene\n", "a.fasta": ">a\nMK\n>b\nGA\n"}


@pytest.mark.parametrize("name", sorted(READ_TO_THE_END_OR_NOT))
@pytest.mark.parametrize("reader", [read_records, read_columns])
def test_a_reader_closes_its_file_read_to_the_end_or_dropped_early(tmp_path, name, reader):
    """No "unclosed file" ResourceWarning, whether a reader is read to its end, closed early, or dropped early
    (the garbage collector finalizes it, inside a reference cycle too)."""
    import gc
    import warnings

    path = tmp_path / name
    path.write_text(READ_TO_THE_END_OR_NOT[name])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        list(reader(path, characters=1) if reader is read_columns else reader(path))
        early = reader(path)
        next(early)
        early.close()
        dropped = reader(path)
        next(dropped)
        del dropped
        cycle = [reader(path)]
        next(cycle[0])
        cycle.append(cycle)
        del cycle
        gc.collect()
    assert [str(warning.message) for warning in caught if warning.category is ResourceWarning] == []


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.text(st.characters(blacklist_characters="\r\x00", blacklist_categories=("Cs",)), max_size=12),
                          st.text(st.characters(blacklist_characters="\r\x00", blacklist_categories=("Cs",)),
                                  min_size=1, max_size=30)), min_size=1, max_size=20))
def test_csv_round_trips_any_text(tmp_path_factory, rows):
    """Whatever the fields hold (quotes, commas, newlines, unicode), a written CSV reads back unchanged."""
    import csv

    path = tmp_path_factory.mktemp("csv") / "rows.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["name", "sequence"])
        writer.writerows(rows)
    records = list(read_records(path, ReaderOptions(id_column="name", strip=False)))
    assert [(r.id, r.sequence) for r in records] == [(name, sequence.replace("\r", "")) for name, sequence in rows]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.from_regex(r"[A-Za-z0-9_|.-]{1,12}", fullmatch=True),
                          st.from_regex(r"[A-Z*-]{1,200}", fullmatch=True)), min_size=1, max_size=20))
def test_fasta_round_trips(tmp_path_factory, records):
    path = tmp_path_factory.mktemp("fa") / "r.fasta"
    path.write_text("".join(f">{name}\n" + "\n".join(seq[i:i + 60] for i in range(0, len(seq), 60)) + "\n"
                            for name, seq in records))
    assert [(r.id, r.sequence) for r in read_records(path)] == records
