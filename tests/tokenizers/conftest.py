"""Real data sets from ../shared/data, read once per session with biotf's own readers."""

from __future__ import annotations

from pathlib import Path

import pytest

from biotf.io.readers import ReaderOptions, read_records


def records(path: Path, **options) -> dict[str, str]:
    """id -> sequence of every record in `path`."""
    return {r.id: r.sequence for r in read_records(path, ReaderOptions(**options))}


@pytest.fixture(scope="session")
def deeploc_test(shared_data) -> dict[str, str]:
    return records(shared_data / "proteins/deeploc_test_set.fasta")


@pytest.fixture(scope="session")
def deeploc_val(shared_data) -> dict[str, str]:
    return records(shared_data / "proteins/deeploc_our_val_set.fasta")


@pytest.fixture(scope="session")
def flip(shared_data) -> dict[str, str]:
    return records(shared_data / "proteins/flip_ss3_sequences.fasta.gz")


@pytest.fixture(scope="session")
def splice(shared_data) -> list[tuple[str, str]]:
    """(instance name, sequence); names repeat in this file, so a list, not a dict."""
    path = shared_data / "dna/uci_splice.csv"
    return [(r.id, r.sequence) for r in read_records(path, ReaderOptions(column="sequence", id_column="instance_name"))]


@pytest.fixture(scope="session")
def promoters(shared_data) -> dict[str, str]:
    return records(shared_data / "dna/uci_promoters.data", format="csv", header=False, column="2", id_column="1")


@pytest.fixture(scope="session")
def genomes(shared_data) -> dict[str, str]:
    """The three GenBank genomes, read with Biopython (through biotf's GenBank reader)."""
    found: dict[str, str] = {}
    for path in sorted((shared_data / "dna").glob("biopython_*.gb*")):
        found.update(records(path))
    return found


@pytest.fixture(scope="session")
def moses(shared_data) -> list[str]:
    return list(records(shared_data / "smiles/moses_test.csv.gz", column="SMILES").values())


@pytest.fixture(scope="session")
def lipo(shared_data) -> list[str]:
    return [r.sequence for r in read_records(shared_data / "smiles/molnet_lipo.csv", ReaderOptions(column="smiles"))]


@pytest.fixture(scope="session")
def esol_raw(shared_data) -> list[str]:
    """ESOL SMILES exactly as in the file: 212 of them end with a space."""
    path = shared_data / "smiles/molnet_esol.csv"
    return [r.sequence for r in read_records(path, ReaderOptions(column="smiles", strip=False))]


@pytest.fixture(scope="session")
def bbbp(shared_data) -> list[str]:
    return [r.sequence for r in read_records(shared_data / "smiles/molnet_bbbp.csv", ReaderOptions(column="smiles"))]
