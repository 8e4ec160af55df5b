"""What happens to a record longer than max_length tokens (`data.long_policy`), in pretraining, fine-tuning and
`biotf predict` alike:
- "crop": a `max_length` window that keeps the leading and trailing special tokens (`<cls>` ... `<eos>`): a random
  window where a generator is given (training batches), the first one otherwise;
- "drop": the record is left out (counted);
- "error": the first such record stops the run, named with its length.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from biotf.io.readers import with_source
from biotf.errors import InputError, check_choice, check_int
from biotf.tokenizers.base import PolicyStats, Tokenizer

# What training does with a sequence longer than data.max_length (`data.long_policy`).
TRAINING_LONG_POLICIES = ("crop", "drop", "error")
# The counts `LongPolicy.apply` adds to, as a run summary lists them.
CROPPED = "longer than max_length, cut to the first max_length tokens"
DROPPED = "longer than max_length, dropped"


@dataclass(frozen=True)
class LongPolicy:
    """`name` (crop | drop | error) for records of more than `max_length` tokens; `special_ids` are kept by a crop."""

    name: str
    max_length: int
    special_ids: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        check_choice("data.long_policy", self.name, TRAINING_LONG_POLICIES)
        check_int("data.max_length", self.max_length, 2)

    def kept(self, lengths: np.ndarray, describe: Callable[[int], str]) -> np.ndarray:
        """Which of the records of `lengths` tokens are kept; under "error" the first one too long is refused,
        named by `describe(its index)`."""
        too_long = lengths > self.max_length
        if self.name == "error" and too_long.any():
            first = int(np.argmax(too_long))
            raise InputError(f"{describe(first)} has {int(lengths[first])} tokens, more than max_length="
                             f"{self.max_length} (long_policy=error; use crop or drop)")
        return ~too_long if self.name == "drop" else np.ones(len(lengths), bool)

    def crop(self, ids: np.ndarray, rng: np.random.Generator | None = None) -> np.ndarray:
        """A `max_length` window of `ids` between its leading and trailing special tokens: random with `rng`,
        else the first."""
        lead = int(ids[0] in self.special_ids)
        trail = int(ids[-1] in self.special_ids)
        window = self.max_length - lead - trail
        start = lead + (int(rng.integers(0, len(ids) - lead - trail - window + 1)) if rng is not None else 0)
        return np.concatenate([ids[:lead], ids[start:start + window], ids[len(ids) - trail:]])

    def apply(self, ids: np.ndarray, record: str, counts: Counter) -> np.ndarray | None:
        """One record's ids within max_length: unchanged, cropped to the first window or dropped (None), counted
        in `counts`; refused under "error"."""
        if len(ids) <= self.max_length:
            return ids
        if not self.kept(np.array([len(ids)]), lambda _: f"record {record!r}")[0]:
            counts[DROPPED] += 1
            return None
        counts[CROPPED] += 1
        return self.crop(ids)


def encode_for_task(tokenizer: Tokenizer, sequence: str, record: str, max_length: int, long_policy: str,
                    counts: Counter, stats: PolicyStats | None = None,
                    source: str | Path | None = None) -> np.ndarray | None:
    """Token ids of one record (special tokens added; what the tokenizer's policies changed counted in `stats`),
    cropped, dropped (None) or refused by `long_policy` (`LongPolicy.apply`, the policy pretraining's datasets
    follow), counted in `counts`. An error names the file `source` the record came from."""
    try:
        ids = tokenizer.encode_batch([sequence], records=[record], stats=stats)[0].astype(np.int64)
        return LongPolicy(long_policy, max_length, tokenizer.special_ids).apply(ids, record, counts)
    except InputError as error:
        if source is None:
            raise
        raise with_source(error, source) from None
