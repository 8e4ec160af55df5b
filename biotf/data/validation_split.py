"""Deterministic train/validation split by record.

A record's split is a pure function of its sequence and the seed (a keyed BLAKE2b hash mapped to
[0, 1)), so identical sequences always land in the same split — duplicates cannot leak between
train and validation — and the split does not depend on file order, chunking or the machine.
"""

from __future__ import annotations

import hashlib

from biotf.errors import ConfigError

SPLITS = ("train", "validation")


def validate_fraction(validation_fraction: float) -> None:
    if not 0.0 <= validation_fraction < 1.0:
        raise ConfigError("data.validation_fraction", validation_fraction, allowed="0 <= fraction < 1")


def is_validation(sequence: str, validation_fraction: float, seed: int = 0) -> bool:
    """True when `sequence` belongs to the validation split."""
    digest = hashlib.blake2b(sequence.encode("utf-8"), digest_size=8, key=seed.to_bytes(8, "little", signed=True))
    return int.from_bytes(digest.digest(), "little") < validation_fraction * 2**64
