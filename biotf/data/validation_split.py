"""Deterministic train/validation split by record.

A record's split is a pure function of its sequence and the seed (a keyed BLAKE2b hash mapped to
[0, 1)), so identical sequences always land in the same split — duplicates cannot leak between
train and validation — and the split does not depend on file order, chunking or the machine.
`validation_mask` decides a list of sequences at once (the token cache), with `is_validation`'s results.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

import numpy as np

from biotf.errors import ConfigError

SPLITS = ("train", "validation")


def validate_fraction(validation_fraction: float) -> None:
    if not 0.0 <= validation_fraction < 1.0:
        raise ConfigError("data.validation_fraction", validation_fraction, allowed="0 <= fraction < 1")


def _hasher(seed: int):
    """BLAKE2b keyed by the seed, 8 bytes of digest: the split's hash."""
    return hashlib.blake2b(digest_size=8, key=seed.to_bytes(8, "little", signed=True))


def is_validation(sequence: str, validation_fraction: float, seed: int = 0) -> bool:
    """True when `sequence` belongs to the validation split."""
    hasher = _hasher(seed)
    hasher.update(sequence.encode("utf-8"))
    return int.from_bytes(hasher.digest(), "little") < validation_fraction * 2**64


def validation_mask(sequences: Sequence[str], validation_fraction: float, seed: int = 0) -> np.ndarray:
    """`is_validation` of each of `sequences` (for a fraction that `validate_fraction` accepts), as a bool array: the
    keyed hash state is copied rather than keyed again per sequence, and the digests are compared in one step."""
    if not sequences or validation_fraction == 0:  # no digest is below 0
        return np.zeros(len(sequences), bool)
    keyed = _hasher(seed)
    digests = []
    for sequence in sequences:
        hasher = keyed.copy()
        hasher.update(sequence.encode("utf-8"))
        digests.append(hasher.digest())
    # an integer is below the float fraction * 2**64 exactly when it is below its ceiling (<= 2**64 - 2048 here)
    threshold = np.uint64(math.ceil(validation_fraction * 2**64))
    return np.frombuffer(b"".join(digests), "<u8") < threshold
