"""One error family for every user-facing failure.

The CLI catches `BiotfError`, prints its message on one line and exits with status 2;
anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral, Real


class BiotfError(Exception):
    """Base class of every error a user can cause (bad input, bad config, bad file)."""


class ConfigError(BiotfError, ValueError):
    """An invalid configuration value or combination; names the key and the allowed values.

    A `key` starting with "-" is a command-line flag, worded as the user typed it: `invalid --limit=-1`,
    `invalid --both-strands` (a switch, value True), `--reference is required with --variants` (value None,
    `required_with` the flag that needs it). Any other key is a config key: `invalid config model.pos='foo'`.
    """

    def __init__(self, key: str, value: object, allowed: str | None = None, reason: str | None = None,
                 required_with: str | None = None):
        self.key, self.value, self.allowed, self.reason = key, value, allowed, reason
        if not key.startswith("-"):
            message = f"invalid config {key}={value!r}"
        elif value is None:
            message = f"{key} is required" + (f" with {required_with}" if required_with else "")
        else:
            message = f"invalid {key}" + ("" if value is True else f"={value!r}")
        if reason:
            message += f": {reason}"
        if allowed:
            message += f" (allowed: {allowed})"
        super().__init__(message)


def check_choice(key: str, value: object, allowed: Iterable[str]) -> None:
    """ConfigError unless `value` is one of `allowed` (listed in order, `a | b | c`)."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise ConfigError(key, value, " | ".join(allowed))


def check_int(key: str, value: object, minimum: int = 1, optional: bool = False) -> None:
    """ConfigError unless `value` is an integer (numpy's too; a bool is not) >= `minimum`, or None where `optional`."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise ConfigError(key, value, f"an integer >= {minimum}" + (", or null" if optional else ""))


def check_number(key: str, value: object, allowed: str, minimum: float = -math.inf, maximum: float = math.inf,
                 above_minimum: bool = False) -> None:
    """ConfigError (`allowed` says the range) unless `value` is a finite real number (int or float, numpy's too; not a
    bool) within [`minimum`, `maximum`] (`above_minimum`: strictly above `minimum`). NaN and infinities are refused
    whatever the range: a comparison with NaN is always false, so `not 0 < nan` is the only safe way to ask."""
    finite = not isinstance(value, bool) and isinstance(value, Real) and math.isfinite(value)
    if not finite or not (value > minimum if above_minimum else value >= minimum) or not value <= maximum:
        raise ConfigError(key, value, allowed)


class InputError(BiotfError, ValueError):
    """A bad input file or record: names the file, the record and the position when known."""


class TokenizationError(InputError):
    """A character the tokenizer's policy refuses; names record, 0-based position and character."""

    def __init__(self, char: str, position: int, record: str | None = None, detail: str | None = None,
                 source: str | None = None):
        self.char, self.position, self.record, self.source = char, position, record, source
        where = []
        if source:
            where.append(f"file {source}")
        if record is not None:
            where.append(f"record {record!r}")
        where.append(f"position {position}")
        message = f"unexpected character {char!r} (U+{ord(char):04X}) at {', '.join(where)}"
        if detail:
            message += f": {detail}"
        super().__init__(message)


class CheckpointError(BiotfError):
    """A checkpoint or model directory that cannot be loaded safely or does not match."""
