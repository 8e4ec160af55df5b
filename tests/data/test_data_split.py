"""The split is a pure function of sequence and seed: duplicates never straddle train/validation."""

from __future__ import annotations

import pytest

from biotf.data.splits import is_validation, validate_fraction, validation_mask
from biotf.errors import ConfigError


def test_fraction_is_respected_and_deterministic():
    sequences = [f"SEQ{i}" for i in range(20000)]
    flags = [is_validation(s, 0.1, seed=3) for s in sequences]
    assert 0.09 < sum(flags) / len(flags) < 0.11
    assert flags == [is_validation(s, 0.1, seed=3) for s in sequences]
    assert flags != [is_validation(s, 0.1, seed=4) for s in sequences]


def test_edges():
    assert not any(is_validation(f"S{i}", 0.0) for i in range(1000))
    with pytest.raises(ConfigError, match="validation_fraction.*0 <= fraction < 1"):
        validate_fraction(1.0)


@pytest.mark.parametrize("fraction", [0.0, 1e-19, 2**-60, 0.05, 0.5, 1 - 2**-53])
@pytest.mark.parametrize("seed", [0, 7, -3])
def test_the_bulk_mask_is_is_validation_of_each_sequence(fraction, seed):
    """The token cache's bulk split decides exactly as `is_validation`, down to fractions whose threshold is not
    an integer; sequences include the empty one and non-ASCII text."""
    sequences = ["", "MKV", "é" * 3, "MKV" * 700] + [f"SEQ{i}" for i in range(3000)]
    assert validation_mask(sequences, fraction, seed).tolist() == [is_validation(s, fraction, seed) for s in sequences]
    assert validation_mask([], fraction, seed).tolist() == []


def test_duplicates_land_together(shared_data):
    """uci_splice has 185 duplicate sequences (SOURCES.md): each lands wholly on one side."""
    from biotf.io.readers import read_records

    sides: dict[str, set[bool]] = {}
    for record in read_records(shared_data / "dna/uci_splice.csv"):
        sides.setdefault(record.sequence, set()).add(is_validation(record.sequence, 0.2))
    assert len(sides) < 3190  # duplicates exist
    assert all(len(s) == 1 for s in sides.values())
